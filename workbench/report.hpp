// workbench/report.hpp -- --report FILE: one HTML page of the run, whole in itself (inline SVG, CSS and a few lines of
// JavaScript; nothing fetched), that any browser opens from the disk. It is well-formed XML too, so
// a strict parser accepts it (make check-report checks that, and renders it in a headless browser).
//
// Sections: the page's style and script; the decoding replay; the page.
#pragma once

#include "svg.hpp"

// The page's style, and its script: the replay's buttons show one step at a time, or all of them.
// (The CDATA marks keep a strict XML parser from reading the CSS's and the script's characters as markup.)
const char* const REPORT_STYLE = R"(<style>/*<![CDATA[*/
body { font-family: sans-serif; margin: 2em auto; max-width: 1250px; padding: 0 1em; color: #222; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
section { margin-bottom: 2.5em; } svg { max-width: 100%; height: auto; }
.row { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
.bar { display: inline-block; height: 0.8em; background: rgb(8,48,107); }
table.top td { padding: 0.1em 0.6em; }
table.mistakes td { padding: 0.1em 1em; font-family: monospace; }
nav a { margin-right: 1em; } .controls button { margin-right: 0.5em; }
/*]]>*/</style>
)";
const char* const REPORT_SCRIPT = R"(<script>//<![CDATA[
(function () {  // the replay: one step at a time, or all of them
  var steps = document.querySelectorAll('#replay .step'), at = 0, all = false;
  function show() {
    for (var i = 0; i != steps.length; i++) steps[i].style.display = (all || i === at) ? '' : 'none';
    document.getElementById('shown').textContent =
      all ? 'all steps' : 'step ' + (at + 1) + ' of ' + steps.length;
  }
  function go(to) { all = false; at = Math.max(0, Math.min(steps.length - 1, to)); show(); }
  document.getElementById('previous').onclick = function () { go(at - 1); };
  document.getElementById('next').onclick = function () { go(at + 1); };
  document.getElementById('all').onclick = function () { all = true; show(); };
  show();
  document.body.setAttribute('data-ready', 'yes');  // make check-report looks for this
})();
//]]></script>
)";

// The step-by-step replay of greedy decoding: at step t the decoder has read START and the first t
// output tokens; each cross-attention head's row t says where in the source it looked, and the
// softmax of the logits' row t gives the next token's probabilities. One teacher-forced pass over
// the output gives every step at once, the same bits as the decoding steps (a test checks that). The page
// numbers the steps from 1: row t is step t + 1. With a beam, each step also lists the hypotheses beam search
// keeps after it (a search stopped after t + 1 steps keeps exactly those: later steps change nothing before).
inline std::string beams_html(Transformer& model, const std::vector<int>& source, int steps, const DecodeConfig& how) {
    std::string rows;
    std::vector<std::vector<Hypothesis>> found = beam_search(model, {source}, steps, how.beam, how.length_penalty);
    for (const Hypothesis& h : found[0])
        rows += fmt("<tr><td>%s</td><td>%s</td><td>%s</td></tr>", svg_escape(join(token_names(h.tokens, model.config),
                                                                                   " ")).c_str(),
                    number_text(h.log_prob).c_str(),
                    number_text(beam_score(h.log_prob, output_length(h.tokens), how.length_penalty)).c_str());
    return fmt("<div>beam search (beam %d, length penalty %g) keeps:<table class=\"top\"><tr><th>output so far"
               "</th><th>log P</th><th>score</th></tr>", how.beam, how.length_penalty) + rows + "</table></div>";
}
inline std::string replay_html(Transformer& model, const std::vector<int>& source, const std::vector<int>& output,
                               const DecodeConfig& how) {
    const ModelConfig& c = model.config;
    std::vector<std::string> beams;  // first: beam search overwrites the maps the forward pass below leaves
    for (int t = 0; t < int(output.size()) && how.beam > 1; t++) beams.push_back(beams_html(model, source, t + 1, how));
    std::vector<int> dec_in = shifted_right(output, c.vocab);
    Matrix probs = softmax_rows(model.forward({source}, {dec_in}));  // (T, V)
    // Where each step looked in the source: cross-attention's row t; a decoder-only model has none, and its
    // self-attention's answer row, S + t, over the source's columns shows the same.
    const bool whole = !has_encoder(c.arch);
    const int first_row = whole ? int(source.size()) : 0;
    std::vector<AttentionLayer> cross;
    for (const AttentionLayer& l : attention_layers(model))
        if (whole || (l.queries_from_decoder && !l.keys_from_decoder)) cross.push_back(l);
    std::vector<std::string> src = token_names(source, c), read = token_names(dec_in, c), head_labels;
    int shown = std::clamp(16 / int(cross.size()), 1, c.n_heads);  // at most 16 rows: the first heads of each layer
    std::string which = shown < c.n_heads ? fmt(" (heads 0 to %d of %d in each layer)", shown - 1, c.n_heads) : "";
    for (const AttentionLayer& l : cross)
        for (int h = 0; h < shown; h++)  // "decoder.0 h1"
            head_labels.push_back(fmt("%s h%d", l.name.substr(0, l.name.find(' ')).c_str(), h));
    std::string html;
    for (int t = 0; t < int(output.size()); t++) {
        // (dec_layers x shown, S): row t of the P of each head shown, from each cross-attention layer
        Matrix cross_rows(int(head_labels.size()), int(source.size()));
        for (std::size_t l = 0, r = 0; l < cross.size(); l++)
            for (int h = 0; h < shown; h++, r++)
                for (int s = 0; s < cross_rows.cols; s++)
                    cross_rows.at(int(r), s) = cross[l].attn->saved[h].P.at(first_row + t, s);
        std::vector<int> order(c.vocab);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                          [&](int a, int b) { return probs.at(t, a) > probs.at(t, b); });
        std::vector<std::string> so_far(read.begin(), read.begin() + t + 1);
        // Cells of 13 pixels at least, so that every head's row has its label.
        SvgHeatmap hm(cross_rows.rows, cross_rows.cols, std::max(320.0, 13.0 * cross_rows.cols), 26);
        hm.row_label = 90;
        hm.title = 0;
        std::string top3;
        for (int k = 0; k < 3; k++)
            top3 += fmt("<tr><td>%s</td><td><span class=\"bar\" style=\"width:%.0fpx\"></span> %s</td></tr>",
                        svg_escape(token_names({order[k]}, c)[0]).c_str(),  // a nan probability: no bar, "nan"
                        std::isfinite(probs.at(t, order[k])) ? 120 * probs.at(t, order[k]) : 0.0,
                        number_text(probs.at(t, order[k])).c_str());
        html += fmt("<div class=\"step\"><h3>step %d: the decoder has read %s and writes %s</h3>\n<div class=\"row\">"
                    "<div>%s over the source, one row a head%s:<br/>", t + 1,
                    svg_escape(join(so_far, " ")).c_str(), svg_escape(token_names({output[t]}, c)[0]).c_str(),
                    whole ? "self-attention (the answer's row)" : "cross-attention", which.c_str()) +
                svg_document(hm.width(cross_rows) + 20, hm.height(cross_rows) + 10,
                             hm.draw(0, 0, "", cross_rows, head_labels, src, 1.0, false, true)) +
                "</div><div>the three likeliest next tokens:<table class=\"top\">"
                "<tr><th>token</th><th>probability</th></tr>" +
                top3 + "</table></div>" + (how.beam > 1 ? beams[t] : "") +
                "</div></div>\n";
    }
    return html;
}

inline std::string html_escape(const std::string& s) { return svg_escape(s); }  // the same four characters

// The held-out sequences the model gets wrong: how many, and the first MOST_MISTAKES of them.
constexpr long MOST_MISTAKES = 20;
inline std::string mistakes_html(Transformer& model, const std::vector<Example>& held_out, const DecodeConfig& how) {
    const ModelConfig& c = model.config;
    std::vector<std::string> wrong;
    long wrong_count = 0;
    std::vector<std::vector<int>> guesses = decode_all(model, held_out, how);  // fewer, when a signal cut it short
    for (std::size_t k = 0; k < guesses.size(); k++) {
        const Example& e = held_out[k];
        if (guesses[k] == e.target) continue;
        if (++wrong_count <= MOST_MISTAKES)
            wrong.push_back("<tr><td>" + html_escape(digits_text(e.source, c)) + "</td><td>" +
                            html_escape(digits_text(guesses[k], c)) + "</td><td>" +
                            html_escape(digits_text(e.target, c)) + "</td></tr>\n");
    }
    std::string html = fmt("<p>%ld of the %zu held-out sequences are wrong%s.</p>\n", wrong_count, held_out.size(),
                           wrong_count > MOST_MISTAKES ? fmt("; the first %ld", MOST_MISTAKES).c_str() : "");
    if (guesses.size() < held_out.size())
        html = fmt("<p>%ld of the first %zu held-out sequences are wrong (of %zu: %s cut the decoding short)%s.</p>\n",
                   wrong_count, guesses.size(), held_out.size(), signal_text(stop_signal).c_str(),
                   wrong_count > MOST_MISTAKES ? fmt("; the first %ld", MOST_MISTAKES).c_str() : "");
    if (!wrong.empty())
        html += "<table class=\"mistakes\"><tr><th>input</th><th>prediction</th><th>truth</th></tr>\n" +
                join(wrong, "") + "</table>\n";
    return html;
}

// With experts (chapter 11): the example's tokens under teacher forcing, layer by layer, each with the experts it went
// to and their gates, best first ("e2 0.71"), and the layer's load over these rows.
inline std::string experts_html(Transformer& model, const std::vector<int>& source, const std::vector<int>& output) {
    const ModelConfig& c = model.config;
    const std::vector<int> decoder_in = shifted_right(output, c.vocab);
    model.forward({source}, {decoder_in});
    std::vector<int> read = decoder_in;  // the decoder's rows: decoder-only, the source's first
    if (!has_encoder(c.arch)) read.insert(read.begin(), source.begin(), source.end());
    std::string html = fmt("<p>Each token of the example (teacher forcing), the %d of %d experts its router chose in "
                           "each layer with their weights, best first; then the layer's load.</p>\n<table>\n",
                           c.top_k(), c.experts);
    auto layer = [&](const std::string& name, const Owned<Layer>& ffn, const std::vector<int>& tokens) {
        const Experts& moe = dynamic_cast<Experts&>(*ffn);
        const std::vector<std::string> names = token_names(tokens, c);
        html += "<tr><th>" + name + "</th>";
        for (std::size_t r = 0; r < tokens.size(); r++) {
            std::string cell = names[r] + ":";
            for (int k = 0; k < moe.K; k++) cell += fmt(" e%d %.2f", moe.chosen[r][k], moe.gate[r][k]);
            html += "<td>" + html_escape(cell) + "</td>";
        }
        std::string load;
        for (int taken : moe.load()) load += (load.empty() ? "" : " ") + std::to_string(taken);
        html += "<td>load " + load + "</td></tr>\n";
    };
    for (std::size_t i = 0; i < model.encoder.size(); i++)
        layer("encoder." + std::to_string(i), model.encoder[i].ffn, source);
    for (std::size_t i = 0; i < model.decoder.size(); i++)
        layer("decoder." + std::to_string(i), model.decoder[i].ffn, read);
    return html + "</table>\n";
}

// The page: the run as `h` recorded it (no curves when nothing was trained), the attention and the decoding of
// `source`, the position table, and the held-out sequences the model gets wrong.
inline std::string report_html(Transformer& model, const History& h, const std::vector<int>& source,
                               const std::vector<Example>& held_out) {
    const ModelConfig& c = model.config;
    std::vector<int> output = decode_outputs(model, {source}, int(source.size()), h.decoding)[0];
    std::string page = std::string("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n"
                                   "<head>\n<meta charset=\"utf-8\"/>\n<title>sorter: a report of one run</title>\n") +
                       REPORT_STYLE + "</head>\n<body>\n<h1>sorter: a report of one run</h1>\n"
                       "<nav><a href=\"#run\">the run</a><a href=\"#curves\">loss and accuracy</a>"
                       "<a href=\"#gradients\">gradient flow</a><a href=\"#attention\">attention</a>"
                       "<a href=\"#replay\">decoding step by step</a><a href=\"#positions\">positions</a>"
                       "<a href=\"#mistakes\">mistakes</a></nav>\n";
    page += "<section id=\"run\"><h2>The run</h2>\n<pre>" + html_escape(h.header) + html_escape(h.final_line) +
            "</pre>\n";
    for (const auto& [title, text] : h.predictions)
        page += "<h3>" + html_escape(title) + "</h3>\n<pre>" + html_escape(text) + "</pre>\n";
    page += "</section>\n";
    if (!h.losses.empty())
        page += "<section id=\"curves\"><h2>Loss and accuracy</h2>\n" + training_svg(h) + "</section>\n"
                "<section id=\"gradients\"><h2>Gradient flow: the backward pass made visible</h2>\n<p>After every "
                "step's backward pass, the size of each block's gradient (the square root of the sum of its squared "
                "entries). A line falling towards 0 would be a vanishing gradient; one shooting up, an exploding "
                "one.</p>\n" + gradient_svg(h) + "</section>\n";
    else
        page += "<section id=\"curves\"><h2>Loss, accuracy and gradient flow</h2><p>Not trained in this run "
                "(a model loaded with --load): no curves.</p></section>\n";
    std::string example = "input " + digits_text(source, c) + ", output " + digits_text(output, c);
    page += "<section id=\"attention\"><h2>Attention</h2>\n<p>Every head of every layer for " + html_escape(example) +
            ". Hold the pointer on a cell to read its weight." +
            (weights_note(c).empty() ? "" : " " + html_escape(weights_note(c)) + ".") + "</p>\n" +
            attention_svg(attention_maps(model, source, output), c.n_heads, "Attention maps: " + example) +
            "</section>\n";
    page += "<section id=\"replay\"><h2>Decoding, step by step</h2>\n<p class=\"controls\"><button id=\"previous\" "
            "type=\"button\">previous</button><button id=\"next\" type=\"button\">next</button><button id=\"all\" "
            "type=\"button\">all steps</button> <span id=\"shown\"></span></p>\n" + replay_html(model, source, output, h.decoding) +
            "</section>\n";
    page += "<section id=\"positions\"><h2>The positional encoding</h2>\n";
    if (const Matrix* table = model.embed.position_table())
        page += positions_svg(*table, POSITION_NAMES[int(c.positions)]);
    else
        page += "<p>--pos none: the model adds no positions.</p>\n";
    page += "</section>\n";
    if (c.experts > 0)  // chapter 11: which experts the example's tokens went to; over the held-out set, experts.svg
        page += "<section id=\"experts\"><h2>The experts</h2>\n" + experts_html(model, source, output) +
                (held_out.empty() ? "" : experts_svg(model, held_out)) + "</section>\n";
    page += "<section id=\"mistakes\"><h2>Held-out mistakes</h2>\n" + mistakes_html(model, held_out, h.decoding);
    page += std::string("</section>\n") + REPORT_SCRIPT + "</body>\n</html>\n";
    return page;
}
