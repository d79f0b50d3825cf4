// workbench/terminal.hpp -- pictures in the terminal: attention heatmaps (--show-attention), the
// position table (--show-pe) and the loss curve; and the attention maps that every picture draws.
//
// Sections: labels; shades and the heatmap; the attention maps of one example, read from what the
// forward pass saved in each head; the position table; the loss curve.
#pragma once

#include "../train.hpp"
#include "text.hpp"

// Labels for the pictures: tokens (S = START, _ = PAD), and rows or columns by number (every `every`-th).
inline std::vector<std::string> token_names(const std::vector<int>& tokens, const ModelConfig& c) {
    std::vector<std::string> names;
    for (int t : tokens) names.push_back(t == PAD ? "_" : t == start_token(c.vocab) ? "S" : std::to_string(t));
    return names;
}
inline std::string digits_text(const std::vector<int>& tokens, const ModelConfig& c) {  // "[3, 1, _]"
    return "[" + join(token_names(tokens, c), ", ") + "]";
}
inline std::vector<std::string> index_labels(int n, int every = 1) {
    std::vector<std::string> labels;
    for (int i = 0; i < n; i++) labels.push_back(i % every ? "" : std::to_string(i));
    return labels;
}
inline double max_abs(const Matrix& m, double floor = 0.0) {  // the bound of a table centred on 0
    for (double v : m.data) floor = std::max(floor, std::fabs(v));
    return floor;
}

// Ten shades from empty to full. A cell shows where its value sits between lo and hi.
constexpr char SHADES[] = " .:-=+*#%@";
inline char shade(double v, double lo, double hi) {  // '?' for a value, or a range, that is nan or inf
    double t = hi > lo ? (v / 2 - lo / 2) / (hi / 2 - lo / 2) : 0.0;  // halves: 1e308 - -1e308 would overflow
    return std::isfinite(t) ? SHADES[std::lround(std::clamp(t, 0.0, 1.0) * 9.0)] : '?';
}

// A matrix as a grid of shades, then (with numbers) the same grid as numbers.
inline void print_heatmap(const std::string& title, const Matrix& m, const std::vector<std::string>& rows,
                          const std::vector<std::string>& cols, double lo, double hi, bool numbers) {
    auto grid = [&](int width, auto print_cell) {  // the column labels, then a labelled line per row
        std::printf("%5s", "");
        for (const std::string& c : cols) std::printf("%*s", width, c.c_str());
        for (int r = 0; r < m.rows; r++) {
            std::printf("\n%5s", rows[r].c_str());
            for (int c = 0; c < m.cols; c++) print_cell(m.at(r, c));
        }
        std::printf("\n");
    };
    std::printf("%s\n", title.c_str());
    grid(3, [&](double v) { std::printf(" %c%c", shade(v, lo, hi), shade(v, lo, hi)); });
    if (numbers) grid(6, [](double v) { std::printf(" %5.2f", v); });
}

// One attention map: the weights P of one head of one layer, with the tokens on each side.
struct AttentionMap {
    std::string layer;  // e.g. "decoder.0 cross-attention"
    int head = 0;
    Matrix P;           // (queries, keys)
    std::vector<std::string> queries, keys;
    std::vector<std::string> predicts;  // for each query row, what it predicts: the next output token on the
                                        // decoder side, its own token on the encoder side (the SVG's row labels)
};

// Every attention layer of the model with its name, in the order of the forward pass.
struct AttentionLayer {
    std::string name;          // "decoder.0 cross-attention"
    MultiHeadAttention* attn;
    bool queries_from_decoder, keys_from_decoder;
};
inline std::vector<AttentionLayer> attention_layers(Transformer& model) {
    std::vector<AttentionLayer> layers;
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        std::string block = "encoder." + std::to_string(i);
        layers.push_back({block + " self-attention", &model.encoder[i].self_attn, false, false});
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        std::string block = "decoder." + std::to_string(i);
        layers.push_back({block + " causal self-attention", &model.decoder[i].self_attn, true, true});
        if (has_encoder(model.config.arch))
            layers.push_back({block + " cross-attention", &model.decoder[i].cross_attn, true, false});
    }
    return layers;
}
// Attention dropout acts in training only; every map and score is of a pass outside training. Said where they show.
inline std::string weights_note(const ModelConfig& c) {
    return c.attn_dropout > 0 ? fmt("attention dropout (%g) acts in training only: these are the weights before it, "
                                    "as decoding uses them", c.attn_dropout) : "";
}
// Run one forward pass and collect every head's map from the caches it saved. The decoder reads START
// and the output so far (teacher forcing over `output`).
inline std::vector<AttentionMap> attention_maps(Transformer& model, const std::vector<int>& source,
                                                const std::vector<int>& output) {
    std::vector<int> dec_in = shifted_right(output, model.config.vocab);
    model.forward({source}, {dec_in});
    std::vector<std::string> src = token_names(source, model.config), dec = token_names(dec_in, model.config),
                             out = token_names(output, model.config);
    std::vector<AttentionMap> maps;
    if (!has_encoder(model.config.arch)) {  // one sequence: the source, START and the output so far
        std::vector<std::string> whole = src, next(src.begin() + 1, src.end());  // each row predicts the next token
        whole.insert(whole.end(), dec.begin(), dec.end());
        next.insert(next.end(), dec.begin(), dec.end());
        next.push_back(out.back());
        for (const AttentionLayer& l : attention_layers(model))
            for (int h = 0; h < l.attn->n_heads; h++)
                maps.push_back({l.name, h, l.attn->saved[h].P, whole, whole, next});
        return maps;
    }
    for (const AttentionLayer& l : attention_layers(model))
        for (int h = 0; h < l.attn->n_heads; h++)
            maps.push_back({l.name, h, l.attn->saved[h].P, l.queries_from_decoder ? dec : src,
                            l.keys_from_decoder ? dec : src, l.queries_from_decoder ? out : src});
    return maps;
}
inline void print_attention(const std::vector<AttentionMap>& maps, bool numbers) {  // --show-attention
    std::printf("shades '%s' run from weight 0 to 1 ('?' is nan or inf); rows are queries, columns are keys; "
                "S = START, _ = PAD\n", SHADES);
    for (const AttentionMap& m : maps)  // each after a blank line
        print_heatmap("\n" + m.layer + ", head " + std::to_string(m.head), m.P, m.queries, m.keys, 0.0, 1.0, numbers);
}

// The position table the model adds to its embeddings (nothing to show for --pos none).
inline void print_positions(Transformer& model, bool numbers) {
    const Matrix* table = model.embed.position_table();
    std::printf("--- positional encoding (%s) ---\n", POSITION_NAMES[int(model.config.positions)].c_str());
    const ModelConfig& c = model.config;
    const int d_k = c.d_model / c.n_heads;
    if (turns_queries_and_keys(c.positions)) {  // the turns' cosines: the sinusoidal table's clocks, per head
        Matrix turns(c.max_len, d_k / 2);
        for (int pos = 0; pos < turns.rows; pos++)
            for (int i = 0; i < turns.cols; i++) turns.at(pos, i) = maths::cos(rotary_angle(pos, i, d_k));
        std::printf("rope: nothing is added to the embeddings; self-attention turns each head's query and key columns "
                    "in pairs (2i, 2i+1) by the angle pos / 10000^(2i / d_k), d_k = %d. Below, the cosine of each "
                    "turn; shades '%s' run from -1 to 1\n\n", d_k, SHADES);
        print_heatmap("position x pair i", turns, index_labels(turns.rows), index_labels(turns.cols), -1.0, 1.0,
                      numbers);
        return;
    }
    if (lowers_scores_by_distance(c.positions)) {
        std::printf("alibi: nothing is added to the embeddings; self-attention lowers head h's score of query i "
                    "for key j by m_h |i - j|. The slopes:");
        std::vector<double> slopes = alibi_slopes_of(c.n_heads);
        for (int h = 0; h < c.n_heads; h++) std::printf("%s head %d %g", h ? "," : "", h, slopes[h]);
        std::printf(" (head 0 is the paper's h = 1)");
        std::printf("\n");
        return;
    }
    if (!table) {
        std::printf("none: with --pos none the model adds nothing, so it sees its input as a bag of tokens\n");
        return;
    }
    double bound = max_abs(*table);
    std::printf("rows: positions 0..%d, columns: the d_model = %d dimensions; shades '%s' run from %.2f to %.2f "
                "('?' is nan or inf)\n\n",
                table->rows - 1, table->cols, SHADES, -bound, bound);
    print_heatmap("position x dimension", *table, index_labels(table->rows), index_labels(table->cols), -bound, bound,
                  numbers);
}

// The loss curve squeezed to `points` values, each the log10 of the mean loss over its stretch of
// steps, clamped to [-12, 6]. A stretch holding a nan or inf loss (training diverged) gives nan.
inline std::vector<double> log_loss_points(const std::vector<double>& losses, int points) {
    std::vector<double> out(points, 0.0);
    for (int i = 0; i < points; i++) {
        std::size_t from = losses.size() * i / points, to = losses.size() * (i + 1) / points;
        double mean = 0.0;
        for (std::size_t s = from; s < to; s++) mean += losses[s] / double(to - from);
        out[i] = std::isfinite(mean) ? std::clamp(log10_of(std::max(mean, 1e-12)), -12.0, 6.0) : std::nan("");
    }
    return out;
}

// The smallest and largest finite values; false when there are none.
inline bool finite_range(const std::vector<double>& values, double& lo, double& hi) {
    bool any = false;
    for (double v : values)
        if (std::isfinite(v)) {
            lo = any ? std::min(lo, v) : v, hi = any ? std::max(hi, v) : v;
            any = true;
        }
    return any;
}

// The training loss, one point a column, on a log scale: it falls by orders of magnitude.
inline void print_loss_plot(const std::vector<double>& losses, long first_step = 1) {
    if (losses.empty()) return;
    const int height = 10, width = std::min<int>(60, int(losses.size()));
    std::vector<double> column = log_loss_points(losses, width);
    double lo = 0.0, hi = 0.0;
    if (!finite_range(column, lo, hi)) {
        std::printf("--- training loss: not a finite number (training diverged; try a smaller --lr) ---\n");
        return;
    }
    if (hi - lo < 1e-9) hi = lo + 1.0;
    std::size_t per_column = (losses.size() + width - 1) / width;
    std::printf("--- training loss (log scale; each column is the mean of %zu step%s) ---\n", per_column,
                per_column == 1 ? "" : "s");
    for (int row = 0; row < height; row++) {
        std::string points(width, ' ');
        for (int c = 0; c < width; c++)  // a nan column (diverged) stays empty
            if (std::isfinite(column[c]) && std::lround((hi - column[c]) / (hi - lo) * (height - 1)) == row)
                points[c] = '*';
        points.erase(points.find_last_not_of(' ') + 1);
        double level = hi - (hi - lo) * row / (height - 1);  // this row's value, in log10
        bool labelled = row == 0 || row == height / 2 || row == height - 1;
        std::string label = labelled ? fmt("%9.4f", maths::pow(10.0, level)) : "";
        std::printf("%9s |%s\n", label.c_str(), points.c_str());
    }
    std::string first = std::to_string(first_step), last = std::to_string(first_step - 1 + long(losses.size()));
    if (losses.size() == 1) last = "";
    std::printf("%9s +%s\n%9s  %s%*s   (step)\n", "", std::string(width, '-').c_str(), "", first.c_str(),
                std::max(int(last.size()) + 2, width - int(first.size())), last.c_str());  // 2 spaces at least
}
