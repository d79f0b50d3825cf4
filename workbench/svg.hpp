// workbench/svg.hpp -- pictures as SVG files for a browser (--svg DIR), which the HTML report shows too:
// the attention maps, the position table, the training curves, the gradient flow and the experts' routes.
//
// Sections: SVG elements; colours and the colour bar; the heatmap; attention.svg and pe.svg; charts
// (step ticks, axes, lines); training.svg and the gradient flow; experts.svg; writing the files.
#pragma once

#include "files.hpp"
#include "history.hpp"
#include "terminal.hpp"

// SVG is text: a <svg> element holding rectangles, lines and text at pixel coordinates.
inline std::string svg_escape(const std::string& s) {  // text as SVG shows it: <, >, & and " escaped
    std::string out;
    for (char ch : s)
        out += ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&quot;" : std::string{ch};
    return out;
}
inline std::string svg_rect(double x, double y, double w, double h, const std::string& fill,
                            const std::string& tip = "") {
    std::string rect =
        fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"", x, y, w, h, fill.c_str());
    return tip.empty() ? rect + "/>\n" : rect + "><title>" + svg_escape(tip) + "</title></rect>\n";  // tip: on hover
}
inline std::string svg_text(double x, double y, const std::string& text, double size = 12,
                            const std::string& anchor = "middle", const std::string& fill = "#222") {
    return fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"%s\" fill=\"%s\">", x, y, size,
               anchor.c_str(), fill.c_str()) + svg_escape(text) + "</text>\n";
}
inline std::string svg_line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1) {
    return fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"/>\n", x1, y1,
               x2, y2, stroke.c_str(), width);
}
inline std::string svg_polyline(const std::string& points, const std::string& style) {  // points: "x,y x,y ..."
    return "<polyline fill=\"none\" " + style + " points=\"" + points + "\"/>\n";
}
inline std::string svg_document(double width, double height, const std::string& body) {  // a whole picture
    return fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\">\n", width, height, width, height) +
           svg_rect(0, 0, width, height, "white") + body + "</svg>\n";
}

// t in [0, 1]: white to dark blue. t in [-1, 1] (diverging): blue, white at 0, red. Each channel
// runs in a straight line from white (255) at t = 0 to the full colour at |t| = 1.
inline std::string color_for(double t, bool diverging) {
    if (!std::isfinite(t)) return "rgb(255,0,255)";  // nan or inf: magenta, a colour no finite value gets
    t = std::clamp(t, diverging ? -1.0 : 0.0, 1.0);
    const double dark_blue[3] = {8, 48, 107}, red[3] = {178, 24, 43}, blue[3] = {33, 102, 172};
    const double* full = !diverging ? dark_blue : t >= 0 ? red : blue;
    auto channel = [&](int k) { return int(std::lround(255 - std::fabs(t) * (255 - full[k]))); };
    return fmt("rgb(%d,%d,%d)", channel(0), channel(1), channel(2));
}

// The key to a heatmap's colours: a bar h pixels tall at (x, y), from `bound` (or 1) at the top down
// to 0 (or -bound when diverging), its ends and middle labelled.
inline std::string svg_colour_bar(double x, double y, double h, double bound, bool diverging) {
    std::string s;
    const int bands = 40;
    for (int i = 0; i < bands; i++) {  // band i from the top, coloured by the value at its middle
        double t = 1.0 - (i + 0.5) / bands * (diverging ? 2.0 : 1.0);
        s += svg_rect(x, y + h * i / bands, 14, h / bands + 0.5, color_for(t, diverging));
    }
    for (int k = 0; k <= 2; k++) {
        double t = 1.0 - k / 2.0 * (diverging ? 2.0 : 1.0);
        s += svg_line(x + 14, y + h * k / 2, x + 18, y + h * k / 2, "#444") +
             svg_text(x + 21, y + h * k / 2 + 4, fmt("%.2f", t * bound), 11, "start");
    }
    return s;
}

// One heatmap with its title and labels, top-left at (x, y), coloured by value / bound; every cell tells
// its value on hover. The cells shrink with the map, so that it is at most `side` pixels across (4 to
// `largest` a cell), and small cells get a label every few rows or columns, so that labels never overlap.
struct SvgHeatmap {
    double cell, label = 34, row_label = 34, title = 20;  // label: the column labels' height
    SvgHeatmap(int rows, int cols, double side, double largest = 30)
        : cell(std::clamp(std::floor(side / std::max(rows, cols)), 4.0, largest)) {}
    int every() const { return int(std::ceil(13.0 / cell)); }  // labels at least 13 pixels apart
    double width(const Matrix& m) const { return row_label + m.cols * cell; }
    double height(const Matrix& m) const { return title + label + m.rows * cell; }
    std::string draw(double x, double y, const std::string& name, const Matrix& m, const std::vector<std::string>& rows,
                     const std::vector<std::string>& cols, double bound, bool diverging, bool numbers) const {
        std::string s = svg_text(x, y + 14, name, 13, "start");
        double top = y + title + label, left = x + row_label, font = std::min(11.0, cell * every() - 2);
        for (int c = 0; c < m.cols; c += every()) s += svg_text(left + (c + 0.5) * cell, top - 8, cols[c], font);
        for (int r = 0; r < m.rows; r += every())
            s += svg_text(left - 6, top + (r + 0.5) * cell + 4, rows[r], font, "end");
        for (int r = 0; r < m.rows; r++)
            for (int c = 0; c < m.cols; c++) {
                double t = m.at(r, c) / bound;
                s += svg_rect(left + c * cell, top + r * cell, cell, cell, color_for(t, diverging),
                              rows[r] + ", " + cols[c] + ": " + number_text(m.at(r, c)));
                if (numbers && cell >= 26)
                    s += svg_text(left + (c + 0.5) * cell, top + (r + 0.5) * cell + 3, number_text(m.at(r, c), 2), 9,
                                  "middle", std::fabs(t) > 0.55 ? "white" : "#222");
            }
        return s;
    }
};

// Every attention map: a heading for each layer, then its heads side by side (in even lines of at
// most 5, so that the picture stays about 1,100 pixels wide), one colour bar for all. A decoder row is
// labelled by the token it predicts. At most 48 maps are drawn (the large variant of make check-report
// has 48), the first heads of every layer, so that no size the flags allow makes a picture too big to
// open; the subtitle says when heads are left out.
constexpr int MOST_MAPS = 48;
inline std::string attention_svg(const std::vector<AttentionMap>& maps, int n_heads, const std::string& caption) {
    const Matrix& first = maps.front().P;
    int layers = int(maps.size()) / n_heads, heads = std::clamp(MOST_MAPS / layers, 1, n_heads);  // heads drawn
    SvgHeatmap hm(first.rows, first.cols, std::clamp(1000.0 / heads - 74, 120.0, 320.0));
    double gap = 40, panel_w = std::max(hm.width(first) + gap, 120.0), panel_h = hm.height(first) + gap, heading = 26;
    int lines = (heads + 4) / 5, per_line = (heads + lines - 1) / lines;  // 8 heads: 2 lines of 4
    double layer_h = heading + lines * panel_h;
    std::string left_out = heads < n_heads ? fmt("; heads %d to %d of each layer are left out here (--show-attention "
                                                 "prints them all)", heads, n_heads - 1) : "";
    std::string body = svg_text(20, 24, caption, 15, "start") +
                       svg_text(20, 44, "rows: queries (a decoder row is labelled by the token it predicts), columns: "
                                        "keys; darker blue = more weight; S = START, _ = PAD" + left_out, 12, "start",
                                "#555");
    for (std::size_t i = 0; i < maps.size(); i++) {
        const AttentionMap& m = maps[i];
        double top = 64 + (int(i) / n_heads) * layer_h;
        if (m.head == 0) body += svg_text(20, top + 16, m.layer, 14, "start");
        if (m.head >= heads) continue;
        body += hm.draw(20 + (m.head % per_line) * panel_w, top + heading + (m.head / per_line) * panel_h,
                        "head " + std::to_string(m.head), m.P, m.predicts, m.keys, 1.0, false, true);
    }
    double right = 20 + per_line * panel_w;
    body += svg_text(right, 70, "weight", 11, "start") + svg_colour_bar(right, 80, 160, 1.0, false);
    return svg_document(std::max(right + 70, 760.0), 74 + layers * layer_h, body);
}

// The position table, blue below 0 and red above.
inline std::string positions_svg(const Matrix& P, const std::string& kind) {
    SvgHeatmap hm(P.rows, P.cols, 1000, 22);
    double bound = max_abs(P, 1e-12);
    std::string body =
        svg_text(20, 24, "Positional encoding (" + kind + "): rows = positions, columns = dimensions", 15, "start") +
        svg_text(20, 44, fmt("blue = %.2f, white = 0, red = +%.2f", -bound, bound), 12, "start", "#555") +
        hm.draw(20, 56, "position x dimension", P, index_labels(P.rows), index_labels(P.cols), bound, true, false);
    double right = 40 + hm.width(P);
    body += svg_text(right, 86, "value", 11, "start") + svg_colour_bar(right, 96, 160, bound, true);
    return svg_document(std::max(right + 70, 660.0), 80 + std::max(hm.height(P), 200.0), body);
}

// ---------------------------------------------------------------------------------------------
// Charts
// ---------------------------------------------------------------------------------------------
// Round steps to mark on an axis from first to last: multiples of 1, 2 or 5 times a power of ten,
// about 5 of them.
inline std::vector<long> step_ticks(long first, long last) {
    long unit = 1, decade = 1;  // 1, 2, 5, 10, 20, 50, ... until at most 5 units fit between first and last
    for (int k = 1; (last - first) / unit > 5; k++) {
        if (k % 3 == 0) decade *= 10;
        unit = decade * (k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 5);
    }
    std::vector<long> ticks;
    for (long t = (first + unit - 1) / unit * unit; t <= last; t += unit) ticks.push_back(t);
    return ticks;
}

// A chart: a plot area w x h pixels at (left, top), steps first..last across, lo..hi up. On a log
// chart lo and hi are decades (lo = -3 is 0.001) and y() is given log10 of a value (log_points takes
// it); otherwise the values are shares, drawn as percentages. frame() draws the axes, grid, ticks, labels.
struct Chart {
    double left, top, w, h;
    long first, last;
    double lo, hi;
    bool log_scale;
    double x(double step) const {
        return left + w * (last > first ? (step - double(first)) / double(last - first) : 0.5);
    }
    double y(double v) const { return top + h * (hi - v) / (hi - lo); }  // v: a share, or log10 of the value
    std::string grid_line(double v, const std::string& label) const {
        return svg_line(left, y(v), left + w, y(v), "#ddd") + svg_text(left - 6, y(v) + 4, label, 11, "end");
    }
    std::string frame(const std::string& title, const std::string& y_label) const {
        std::string s = svg_text(left + w / 2, top - 12, title, 12);
        if (log_scale)
            for (double d = lo; d <= hi; d++) s += grid_line(d, fmt("%g", maths::pow(10.0, d)));
        else
            for (int p = 0; p <= 100; p += 25) s += grid_line(p / 100.0, fmt("%d%%", p));
        for (long t : step_ticks(first, last))
            s += svg_line(x(double(t)), top + h, x(double(t)), top + h + 5, "#444") +
                 svg_text(x(double(t)), top + h + 18, std::to_string(t), 11);
        return s + svg_line(left, top, left, top + h, "#444") + svg_line(left, top + h, left + w, top + h, "#444") +
               svg_text(left + w / 2, top + h + 36, "step", 12) +
               fmt("<text transform=\"rotate(-90 %.1f %.1f)\" x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                   "text-anchor=\"middle\" fill=\"#222\">", left - 48, top + h / 2, left - 48, top + h / 2) +
               svg_escape(y_label) + "</text>\n";
    }
    // A line through (step, value) points; a point whose value is not finite is left out.
    std::string series(const std::vector<std::pair<double, double>>& points, const std::string& style,
                       bool dots = false) const {
        std::string line, marks;
        for (auto [step, v] : points)
            if (std::isfinite(v)) {
                line += fmt("%.1f,%.1f ", x(step), y(v));
                if (dots) marks += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#555\"/>\n", x(step), y(v));
            }
        return svg_polyline(line, style) + marks;
    }
};

// A long series as at most `points` (step, log10 value) pairs: each the mean over its stretch of steps.
inline std::vector<std::pair<double, double>> log_points(const std::vector<double>& values, long first_step,
                                                        int points) {
    std::vector<double> ys = log_loss_points(values, points);
    std::vector<std::pair<double, double>> out;
    for (int i = 0; i < points; i++) {  // at the middle step of stretch i
        std::size_t from = values.size() * i / points, to = values.size() * (i + 1) / points;
        out.push_back({double(from + to - 1) / 2.0 + double(first_step), ys[i]});
    }
    return out;
}
// The decades a log chart needs to hold every finite value of these series.
inline void decades_of(const std::vector<std::pair<double, double>>& points, double& lo, double& hi, bool& any) {
    for (auto [step, v] : points)
        if (std::isfinite(v)) {
            lo = any ? std::min(lo, std::floor(v)) : std::floor(v);
            hi = any ? std::max(hi, std::ceil(v)) : std::ceil(v);
            any = true;
        }
}

// Two charts side by side: the training and held-out loss (log scale), and the held-out accuracy.
inline std::string training_svg(const History& h) {
    long last = h.first_step + long(h.losses.size()) - 1;
    std::vector<std::pair<double, double>> held_out, exact, token,
        train = log_points(h.losses, h.first_step, std::min<int>(400, int(h.losses.size())));
    for (const EvalPoint& e : h.evals) {
        held_out.push_back({double(e.step), log10_of(std::max(e.held_out_loss, 1e-12))});
        exact.push_back({double(e.step), e.exact});
        token.push_back({double(e.step), e.token});
    }
    double lo = 0, hi = 0;
    bool any = false;
    decades_of(train, lo, hi, any);
    decades_of(held_out, lo, hi, any);
    if (hi <= lo) hi = lo + 1;
    Chart loss{80, 60, 400, 240, h.first_step, last, lo, hi, true};
    Chart acc{600, 60, 400, 240, h.first_step, last, 0, 1, false};
    std::string body = svg_text(20, 24, "Training: the loss (left, log scale) and the held-out accuracy (right)", 15,
                                "start");
    if (!any) body += svg_text(loss.left + loss.w / 2, loss.top + loss.h / 2, "loss not finite (diverged)", 12);
    body += loss.frame("training loss (red), held-out loss (grey, dots)", "cross-entropy") +
            loss.series(train, "stroke=\"rgb(178,24,43)\" stroke-width=\"1.5\"") +
            loss.series(held_out, "stroke=\"#555\" stroke-width=\"1.5\" stroke-dasharray=\"4,3\"", true) +
            acc.frame("held-out: exact-match (solid), token-accuracy (dashed)", "held-out accuracy") +
            acc.series(exact, "stroke=\"rgb(8,48,107)\" stroke-width=\"2\"", true) +
            acc.series(token, "stroke=\"rgb(107,174,214)\" stroke-width=\"2\" stroke-dasharray=\"5,3\"");
    return svg_document(1030, 360, body);
}

// The gradient flow: each block's gradient size over the steps, one line a block, on a log scale.
inline std::string gradient_svg(const History& h) {
    const char* colours[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"};
    long last = h.first_step + long(h.gradient_norms.size()) - 1;
    int points = std::min<int>(300, int(h.gradient_norms.size()));
    std::vector<std::vector<std::pair<double, double>>> lines;
    double lo = 0, hi = 0;
    bool any = false;
    for (std::size_t b = 0; b < h.blocks.size(); b++) {
        std::vector<double> norms;
        for (const std::vector<double>& step : h.gradient_norms) norms.push_back(step[b]);
        lines.push_back(log_points(norms, h.first_step, points));
        decades_of(lines.back(), lo, hi, any);
    }
    if (hi <= lo) hi = lo + 1;
    Chart chart{80, 60, 560, 280, h.first_step, last, lo, hi, true};
    std::string body = svg_text(20, 24, "Gradient flow: the size of each block's gradient, step by step (log scale)",
                                15, "start") +
                       chart.frame("|gradient| of each block (mean over each stretch of steps)", "gradient norm");
    for (std::size_t b = 0; b < lines.size(); b++) {
        std::string colour = colours[b % 8];
        std::string dashes = b < 8 ? "" : " stroke-dasharray=\"4,2\"";  // past 8 blocks a colour comes again, dashed
        body += chart.series(lines[b], "stroke=\"" + colour + "\" stroke-width=\"1.5\"" + dashes) +
                fmt("<line x1=\"670\" y1=\"%.1f\" x2=\"690\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"%s/>\n",
                    70 + 18.0 * b, 70 + 18.0 * b, colour.c_str(), dashes.c_str()) +
                svg_text(696, 74 + 18.0 * b, h.blocks[b], 12, "start");
    }
    return svg_document(820, std::max(400.0, 90 + 18.0 * lines.size()), body);
}
// With experts (chapter 11), experts.svg: for each layer, which expert is the first choice of the rows reading each
// token (a digit, S = START, _ = PAD; a token no row reads is left out), as the share of that token's rows, over the
// first 200 held-out examples under teacher forcing (what --inspect prints, drawn); beside it each expert's load, the
// share of the K n choices it took, against the even share 1 / E. A router that collapsed shows one tall bar; one
// whose experts specialise, one dark cell a row.
inline std::string experts_svg(Transformer& model, const std::vector<Example>& held_out) {
    const ModelConfig& c = model.config;
    const Inputs in = inputs_of(held_out, 0, 200);
    model.forward(in.sources, in.targets_in);
    std::vector<int> read = Transformer::concatenated(in.targets_in);  // the decoder's rows; decoder-only: source first
    if (!has_encoder(c.arch)) read.clear();
    for (std::size_t e = 0; !has_encoder(c.arch) && e < in.sources.size(); e++) {
        read.insert(read.end(), in.sources[e].begin(), in.sources[e].end());
        read.insert(read.end(), in.targets_in[e].begin(), in.targets_in[e].end());
    }
    const int E = c.experts, vocab = c.vocab;
    const SvgHeatmap hm(vocab, E, 300);
    const double bar = std::max(hm.cell, 30.0), chart_h = 160, chart_x = 20 + hm.row_label + E * hm.cell + 60;
    const double panel_h = std::max(hm.title + hm.label + vocab * hm.cell, chart_h + 70) + 40;
    std::string body = svg_text(20, 24, fmt("Experts: %d of %d a token%s, over %zu held-out examples (teacher forcing)",
                                            c.top_k(), E, c.shared_experts ? fmt(", and %d shared", c.shared_experts)
                                            .c_str() : "", in.sources.size()), 15, "start") +
                       svg_text(20, 44, "left: of the rows reading each token (S = START, _ = PAD), the share whose "
                                        "first choice is each expert;", 12, "start", "#555") +
                       svg_text(20, 60, "right: each expert's load, its share of all the choices; the red line is "
                                        "an even load (1 / E)", 12, "start", "#555");
    auto layer = [&](int i, const std::string& name, const Owned<Layer>& ffn, const std::vector<int>& tokens) {
        const Experts& moe = dynamic_cast<Experts&>(*ffn);
        const double top = 80 + i * panel_h;
        std::vector<std::vector<double>> firsts(vocab, std::vector<double>(E, 0.0));  // token v's rows, by first choice
        std::vector<int> rows(vocab, 0);
        for (std::size_t r = 0; r < tokens.size(); r++) firsts[tokens[r]][moe.chosen[r][0]] += 1, rows[tokens[r]]++;
        std::vector<int> shown;  // the tokens some row reads
        for (int v = 0; v < vocab; v++)
            if (rows[v] > 0) shown.push_back(v);
        Matrix share(int(shown.size()), E);  // (tokens read, E): the share of token v's rows whose first choice is j
        std::vector<std::string> names, experts;
        for (std::size_t k = 0; k < shown.size(); k++) {
            const int v = shown[k];
            names.push_back(v == PAD ? "_" : v == vocab - 1 ? "S" : std::to_string(v));
            for (int j = 0; j < E; j++) share.at(int(k), j) = firsts[v][j] / rows[v];
        }
        for (int j = 0; j < E; j++) experts.push_back("e" + std::to_string(j));
        std::string s = svg_text(20, top + 16, name, 14, "start") +
                        hm.draw(20, top + 24, "first choice, by token read", share, names, experts, 1.0, false, true);
        const std::vector<int> load = moe.load();
        double most = 2.0 / E;  // the chart's top: twice the even share, or the largest load
        for (int taken : load) most = std::max(most, taken / (double(moe.K) * tokens.size()));
        const double base = top + 24 + hm.title + hm.label + chart_h;
        s += svg_text(chart_x, top + 38, "load by expert", 13, "start") +
             svg_line(chart_x, base, chart_x + E * bar, base, "#444");
        for (int j = 0; j < E; j++) {
            const double percent = 100.0 * load[j] / (double(moe.K) * tokens.size());  // as --inspect reckons it
            const double h = chart_h * percent / 100 / most;
            s += svg_rect(chart_x + j * bar + 3, base - h, bar - 6, h, "rgb(58,110,165)",
                          fmt("e%d: %.1f%%", j, percent)) +
                 svg_text(chart_x + (j + 0.5) * bar, base + 15, "e" + std::to_string(j), 11) +
                 svg_text(chart_x + (j + 0.5) * bar, base + 30, fmt("%.1f", percent), 10, "middle", "#555");
        }
        const double even = base - chart_h / (E * most);
        s += svg_polyline(fmt("%.1f,%.1f %.1f,%.1f", chart_x, even, chart_x + E * bar, even),
                          "stroke=\"#c00\" stroke-dasharray=\"4 3\"") +
             svg_text(chart_x + E * bar + 4, even + 4, fmt("even %.1f%%", 100.0 / E), 11, "start", "#c00") +
             svg_text(chart_x + E * bar + 4, base + 30, "% of choices", 10, "start", "#555");
        return s;
    };
    int i = 0;
    const std::vector<int> sources = Transformer::concatenated(in.sources);
    for (std::size_t b = 0; b < model.encoder.size(); b++)
        body += layer(i++, "encoder." + std::to_string(b), model.encoder[b].ffn, sources);
    for (std::size_t b = 0; b < model.decoder.size(); b++)
        body += layer(i++, "decoder." + std::to_string(b), model.decoder[b].ffn, read);
    return svg_document(std::max(720.0, chart_x + E * bar + 100), 90 + i * panel_h, body);
}

inline void write_svg(const std::string& dir, const std::string& name, const std::string& svg) {  // DIR/name
    std::string path = (std::filesystem::path(dir) / name).string();
    write_atomically(path, "--svg", [&](FILE* f) { std::fputs(svg.c_str(), f); });
    std::printf("wrote %s\n", path.c_str());
}

// Every picture that applies: one example's attention, the position table, the training curves, the experts' routes.
inline void write_pictures(const std::string& dir, Transformer& model, const std::vector<int>& source,
                           const History* history, const DecodeConfig& how, const std::vector<Example>& held_out) {
    const ModelConfig& c = model.config;
    std::vector<int> output = decode_outputs(model, {source}, int(source.size()), how)[0];
    std::string caption = "Attention maps: input " + digits_text(source, c) + ", output " + digits_text(output, c);
    write_svg(dir, ATTENTION_SVG,
              attention_svg(attention_maps(model, source, output), c.n_heads, caption));
    if (const Matrix* table = model.embed.position_table())
        write_svg(dir, POSITIONS_SVG, positions_svg(*table, POSITION_NAMES[int(c.positions)]));
    if (history && !history->losses.empty()) write_svg(dir, TRAINING_SVG, training_svg(*history));
    if (c.experts > 0 && !held_out.empty()) write_svg(dir, EXPERTS_SVG, experts_svg(model, held_out));
}
