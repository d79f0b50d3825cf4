// workbench/checkpoint.hpp -- --save and --load: a model, its data settings and its training state
// in one plain-text file; and --dump-step, the first training step for make reference.
//
// Sections: writing; reading, every value checked (a corrupt file is one line naming its line number, never a
// crash); --dump-step.
#pragma once

#include <utility>

#include "files.hpp"

// What a checkpoint keeps besides the model's tensors, as the run holds it (main.cpp): the data settings, the
// training settings (not --steps), where training stands (train.hpp's TrainState) and the --train-data file.
// The format is plain text (docs/checkpoints.md shows a whole file); "%.17g" reads back to the same bits. The
// sinusoidal table is computed, not stored. Version 2 adds a training section after the tensors, so --load FILE
// --steps N goes on where the run stopped (version 1 files still load). Version 3 adds the regularisers' lines
// (header and training), written only when one is on: a model without is version 2, byte for byte as before.

// Every value a checkpoint holds is at most MAX_STORED in size: far beyond any trained model's (a run stops
// when its loss is no longer finite), and small enough that the square of one never overflows.
constexpr double MAX_STORED = 1e100;
// Adam's running means always satisfy m^2 <= (1 - beta1)^2 / ((1 - beta2) (1 - beta1^2 / beta2)) s, about
// 2.88 s (Cauchy-Schwarz over the two weighted sums of past gradients); a file is allowed 3 s, for rounding.
constexpr double ADAM_M_SQUARED_OVER_S = 3.0;

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------
inline void write_matrix(FILE* f, const Matrix& m) {  // one line per row
    for (int r = 0; r < m.rows; r++)
        for (int c = 0; c < m.cols; c++) std::fprintf(f, "%.17g%c", m.at(r, c), c + 1 == m.cols ? '\n' : ' ');
}
inline bool needs_version_3(const ModelConfig& c, const TrainConfig& t) {  // a regulariser is on
    return c.tie_embeddings || c.dropout > 0 || c.attn_dropout > 0 || t.label_smoothing > 0 || t.clip > 0 ||
           t.weight_decay > 0;
}
inline void write_checkpoint(FILE* f, Transformer& model, const DataConfig& d, const TrainConfig& t,
                             const TrainState& state, const TrainFile& file) {  // the whole file
    const ModelConfig& c = model.config;
    const bool v3 = needs_version_3(c, t);
    std::fprintf(f, "sorter-checkpoint %d\nvocab %d\nmax_len %d\nd_model %d\nn_heads %d\nd_ff %d\nenc_layers %d\n"
                 "dec_layers %d\n", v3 ? 3 : 2, c.vocab, c.max_len, c.d_model, c.n_heads, c.d_ff, c.enc_layers,
                 c.dec_layers);
    std::fprintf(f, "norm %s\npositions %s\nactivation %s\nembed_scale %d\n", NORM_NAMES[int(c.norm)].c_str(),
                 POSITION_NAMES[int(c.positions)].c_str(), ACTIVATION_NAMES[int(c.activation)].c_str(),
                 c.embed_scale ? 1 : 0);
    if (v3)
        std::fprintf(f, "tie_embeddings %d\ndropout %.17g\nattn_dropout %.17g\n", c.tie_embeddings ? 1 : 0, c.dropout,
                     c.attn_dropout);
    std::fprintf(f, "task %s\nseq_len %d\nmin_len %d\nmax_digit %d\n", TASK_NAMES[int(d.task)].c_str(), d.seq_len,
                 d.min_len, d.max_digit);
    auto params = model.parameters();
    std::fprintf(f, "tensors %zu\n", params.size());
    for (auto& [name, p] : params) {
        std::fprintf(f, "tensor %s %d %d\n", name.c_str(), p->value.rows, p->value.cols);
        write_matrix(f, p->value);
    }
    const Optimizer& opt = state.optimizer;
    std::fprintf(f, "training\noptimizer %s\nlr %.17g\nschedule %s\nwarmup %ld\nbatch %d\nupdates %ld\ndraws %llu\n"
                 "position_draws %llu\n", OPTIMIZER_NAMES[int(opt.kind)].c_str(), t.lr,
                 SCHEDULE_NAMES[int(t.schedule)].c_str(), t.warmup, t.batch, state.updates,
                 (unsigned long long)state.batch_draws.state, (unsigned long long)model.position_draws.state);
    if (v3)
        std::fprintf(f, "dropout_draws %llu\nlabel_smoothing %.17g\nclip %.17g\nweight_decay %.17g\n",
                     (unsigned long long)model.dropout_draws.state, t.label_smoothing, t.clip, t.weight_decay);
    if (file.lines > 0)  // only after --train-data: files of generated data are as they were
        std::fprintf(f, "train_data %ld %llu\n", file.lines, (unsigned long long)file.fingerprint);
    for (std::size_t k = 0; k < opt.m.size() && opt.kind != OptimizerKind::sgd; k++) {  // none before the first update
        std::fprintf(f, "m %s\n", params[k].first.c_str());
        write_matrix(f, opt.m[k]);
        if (opt.kind != OptimizerKind::adam) continue;
        std::fprintf(f, "s %s\n", params[k].first.c_str());
        write_matrix(f, opt.s[k]);
    }
    std::fprintf(f, "end\n");
}
inline void save_checkpoint(const std::string& path, Transformer& model, const DataConfig& d, const TrainConfig& t,
                            const TrainState& state, const TrainFile& file) {  // --save FILE
    // --load rejects nan, inf and values beyond MAX_STORED, so a diverged model is refused here rather than
    // written unreadable.
    for (auto& [name, p] : model.parameters())
        for (double v : p->value.data) {
            if (!std::isfinite(v))
                fail("--save " + path + ": tensor '" + name + "' holds nan or inf (training diverged); not saved");
            if (std::fabs(v) > MAX_STORED)
                fail("--save " + path + ": tensor '" + name + fmt("' holds a value beyond %g (training diverged); "
                                                                  "not saved", MAX_STORED));
        }
    write_atomically(path, "--save", [&](FILE* f) { write_checkpoint(f, model, d, t, state, file); });
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------
// How many values a model of config c holds, known before it is built (tested against parameters()).
inline long parameter_count(const ModelConfig& c) {
    long d = c.d_model, ff = c.d_ff, vocab = c.vocab, norm = 2 * d, attention = 4 * d * d, ffn = 2 * d * ff + ff + d;
    long embed = vocab * d + (c.positions == Positions::learned ? c.max_len * d : 0);
    return embed + c.enc_layers * (2 * norm + attention + ffn) + c.dec_layers * (3 * norm + 2 * attention + ffn) +
           norm + (c.tie_embeddings ? 0 : d * vocab) + vocab;
}

// Reads a checkpoint word by word; a word over 64 characters is an error, so no file can make a huge string.
struct WordReader {
    std::istream& in;
    std::string where;  // "--load FILE", the start of every message
    long long line = 1;  // 64 bits: a file of 2^31 newlines must not overflow it
    std::string at() const { return where + " line " + std::to_string(line); }  // the place, for a message
    [[noreturn]] void error(const std::string& what) const { fail(at() + ": " + what); }
    std::string pushed;  // a word read ahead and put back
    void put_back(const std::string& w) { pushed = w; }
    std::string next() {  // "" at the end of the file
        if (!pushed.empty()) return std::exchange(pushed, "");
        int c;
        while ((c = in.peek()) != EOF && std::isspace(c))
            if (in.get() == '\n') line++;
        std::string w;
        while ((c = in.peek()) != EOF && !std::isspace(c)) {
            if (w.size() == 64) error("a word longer than 64 characters");
            w += char(in.get());
        }
        return w;
    }
    std::string expect(const std::string& what) {  // the next word, which must be there
        std::string w = next();
        if (w.empty()) error("the file ends early (truncated): expected " + what);
        return w;
    }
    std::string value_of(const std::string& key) {  // the value after "key", on the same line
        std::string w = expect("'" + key + "'");
        if (w != key) error("expected '" + key + "', found '" + w + "'");
        long long key_line = line;
        w = expect("the value of " + key);
        if (line != key_line) fail(where + " line " + std::to_string(key_line) + ": '" + key + "' has no value");
        return w;
    }
    long whole(const std::string& key, long lo, long hi) {
        std::string w = value_of(key);
        return whole_or_fail(at() + ": " + key, w, lo, hi);
    }
    // A whole number below 2^64 (a generator's state, a fingerprint): after "key", or, with key "", the next
    // word, which must be on line `on_line`.
    uint64_t whole_u64(const std::string& key, long long on_line = 0) {
        std::string w = key.empty() ? expect("a whole number") : value_of(key);
        if (key.empty() && line != on_line) fail(where + " line " + std::to_string(on_line) + ": a value is missing");
        errno = 0;
        uint64_t v = number_syntax(w, true) ? std::strtoull(w.c_str(), nullptr, 10) : 0;
        if (!number_syntax(w, true) || errno == ERANGE)
            error((key.empty() ? "" : key + " ") + w + ": expected a whole number below 2^64");
        return v;
    }
    double number(const std::string& key, double lo, double hi) {  // lo <= X <= hi
        std::string w = value_of(key);
        double v = 0;
        if (!parse_finite(w, v) || v < lo || v > hi) error(key + " " + w + fmt(": expected a number from %g to %g", lo, hi));
        return v;
    }
    int choice(const std::string& key, const std::vector<std::string>& names) {
        std::string w = value_of(key);
        return choice_or_fail(at() + ": " + key, w, names);
    }
};

// The m.data.size() values of `what` (a tensor, or an optimizer's running mean of one), into m. Each is
// a finite number of at most MAX_STORED in size, and passes `check` (which returns what is wrong, or "").
inline void read_values(WordReader& r, const std::string& what, Matrix& m,
                        const std::function<std::string(std::size_t i, double v)>& check = nullptr) {
    for (std::size_t i = 0; i < m.data.size(); i++) {
        std::string v = r.next();
        if (v.empty())
            r.error("the file ends early (truncated): " + what + " has " + std::to_string(i) + " of its " +
                    std::to_string(m.data.size()) + " values");
        if (parse_finite(v, m.data[i])) {
            std::string problem = std::fabs(m.data[i]) > MAX_STORED ? fmt("is beyond %g in size", MAX_STORED)
                                  : check ? check(i, m.data[i]) : "";
            if (problem.empty()) continue;
            r.error(what + fmt(" value %zu: ", i) + v + " " + problem);
        }
        if (r.in.peek() == EOF) r.error("the file ends early (truncated) inside " + what);
        r.error(what + fmt(" value %zu: '", i) + v + "' is not a finite number");
    }
}

// Version 2's training section, after the tensors: the settings, the optimizer's update count and
// running means (none for SGD, none before the first update), and the training draws.
inline void read_training(WordReader& r, Transformer& model, TrainConfig& t, TrainState& state, TrainFile& file,
                          bool v3) {
    Optimizer& opt = state.optimizer = Optimizer(OptimizerKind(r.choice("optimizer", OPTIMIZER_NAMES)));
    std::string lr = r.value_of("lr");
    if (!parse_finite(lr, t.lr) || t.lr <= 0 || t.lr > MAX_LR)
        r.error("lr " + lr + fmt(": expected above 0 and at most %g", MAX_LR));
    t.optimizer = opt.kind;
    t.schedule = Schedule(r.choice("schedule", SCHEDULE_NAMES));
    t.warmup = r.whole("warmup", 1, MAX_STEPS);
    t.batch = int(r.whole("batch", 1, MAX_BATCH));
    state.updates = r.whole("updates", 0, MAX_STEPS * 1000);
    state.batch_draws.state = r.whole_u64("draws");  // the generators' states
    model.position_draws.state = r.whole_u64("position_draws");
    if (v3) {  // the regularisers
        model.dropout_draws.state = r.whole_u64("dropout_draws");
        t.label_smoothing = r.number("label_smoothing", 0, MAX_FRACTION);
        opt.clip = t.clip = r.number("clip", 0, MAX_CLIP);
        opt.weight_decay = t.weight_decay = r.number("weight_decay", 0, MAX_WEIGHT_DECAY);
        if (t.lr * t.weight_decay >= 1.0) r.error("weight_decay: lr x weight_decay must stay below 1");
    }
    std::string w = r.next();
    if (w == "train_data") {  // only a model trained on a --train-data file: its size and fingerprint
        r.put_back(w);
        file.lines = r.whole("train_data", 1, MAX_TRAIN_LINES);
        file.fingerprint = r.whole_u64("", r.line);
    } else {
        r.put_back(w);
    }
    if (state.updates == 0 || opt.kind == OptimizerKind::sgd) return;
    for (auto& [name, p] : model.parameters()) {
        opt.m.emplace_back(p->value.rows, p->value.cols);
        if (opt.kind == OptimizerKind::adam) opt.s.emplace_back(p->value.rows, p->value.cols);
        for (const char* which : {"m", "s"}) {
            if (which[0] == 's' && opt.kind != OptimizerKind::adam) continue;
            std::string w = r.expect(std::string(which) + " of '" + name + "'");
            if (w == "end")
                r.error(fmt("the optimizer's running means are missing: after %ld updates, %s keeps ", state.updates,
                            OPTIMIZERS[int(opt.kind)].title.c_str()) +
                        (opt.kind == OptimizerKind::adam ? "'m' and 's'" : "'m'") + " for every tensor, from '" +
                        which + " " + name + "' on");
            std::string got = r.expect("a tensor name");
            if (w != which || got != name)
                r.error("expected '" + std::string(which) + " " + name + "', found '" + w + " " + got + "'");
            const Matrix& m = opt.m.back();
            read_values(r, std::string(which) + " of '" + name + "'", which[0] == 'm' ? opt.m.back() : opt.s.back(),
                        [&](std::size_t i, double v) -> std::string {  // what Adam's s and m always satisfy
                            if (which[0] == 'm') return "";
                            if (v < 0) return "is negative: a second moment is a running mean of squares";
                            return m.data[i] * m.data[i] <= ADAM_M_SQUARED_OVER_S * v ? ""
                                   : fmt("is too small for its first moment %g (Adam keeps m^2 <= %.2f s)",
                                         m.data[i], ADAM_M_SQUARED_OVER_S);
                        });
        }
    }
}

// The header, in the order write_checkpoint writes it, each value checked, then the values that must agree.
inline void read_header(WordReader& r, ModelConfig& c, DataConfig& d, bool v3) {
    c.vocab = r.whole("vocab", 3, MAX_DIGIT + 2);
    c.max_len = r.whole("max_len", 1, RANDOM_POSITION_SPAN * MAX_SEQ_LEN);
    c.d_model = r.whole("d_model", 1, MAX_D_MODEL);
    c.n_heads = r.whole("n_heads", 1, MAX_HEADS);
    c.d_ff = r.whole("d_ff", 1, MAX_D_FF);
    c.enc_layers = r.whole("enc_layers", 1, MAX_LAYERS);
    c.dec_layers = r.whole("dec_layers", 1, MAX_LAYERS);
    c.norm = Norm(r.choice("norm", NORM_NAMES));
    c.positions = Positions(r.choice("positions", POSITION_NAMES));
    c.activation = Activation(r.choice("activation", ACTIVATION_NAMES));
    c.embed_scale = r.whole("embed_scale", 0, 1) == 1;
    if (v3) {
        c.tie_embeddings = r.whole("tie_embeddings", 0, 1) == 1;
        c.dropout = r.number("dropout", 0, MAX_FRACTION);
        c.attn_dropout = r.number("attn_dropout", 0, MAX_FRACTION);
    }
    d.task = Task(r.choice("task", TASK_NAMES));
    d.seq_len = r.whole("seq_len", 1, MAX_SEQ_LEN);
    d.min_len = r.whole("min_len", 1, MAX_SEQ_LEN);
    d.max_digit = r.whole("max_digit", 1, MAX_DIGIT);
    std::string header = r.where + " header: ";  // two header values that disagree
    if (c.d_model % c.n_heads != 0)
        fail(header + fmt("d_model %d is not a multiple of n_heads %d", c.d_model, c.n_heads));
    if (d.min_len > d.seq_len) fail(header + fmt("min_len %d is above seq_len %d", d.min_len, d.seq_len));
    if (c.vocab != vocab_size(d))
        fail(header + fmt("vocab %d does not match max_digit %d (vocab = max_digit + 2)", c.vocab, d.max_digit));
    if (c.max_len < d.seq_len) fail(header + fmt("max_len %d is below seq_len %d", c.max_len, d.seq_len));
}

// Every value takes at least two bytes (a digit and a space or newline), so a file too short for the
// model its header describes is refused before that model is allocated. A pipe cannot tell its length:
// it skips this (the caps on every size still bound the allocation), and its stream is left as it was.
inline void check_room_for(WordReader& r, const ModelConfig& c) {
    std::streampos here = r.in.tellg();
    if (here < 0) {  // not a file: tellg failed and set failbit, which the reading below must not see
        r.in.clear();
        return;
    }
    r.in.seekg(0, std::ios::end);
    std::streamoff left = r.in.tellg() - here;
    r.in.clear();
    r.in.seekg(here);
    if (left >= 0 && left < 2 * parameter_count(c))
        r.error(fmt("the file ends early (truncated): this header describes %ld values, and only %lld bytes follow",
                    parameter_count(c), (long long)left));
}

// The tensors, which must match the model the header describes, name by name and shape by shape.
inline void read_tensors(WordReader& r, Transformer& model, long count) {
    auto params = model.parameters();
    if (count != long(params.size()))
        r.error(fmt("the header lists %ld tensors; this configuration has %zu", count, params.size()));
    for (auto& [name, p] : params) {
        Matrix& m = p->value;
        std::string w = r.next(), tensor = "tensor '" + name + "'";
        if (w.empty()) r.error("the file ends early (truncated): " + tensor + " is missing");
        if (w != "tensor") r.error(tensor + " is missing (found '" + w + "' where it should start)");
        std::string got = r.expect("a tensor name");
        if (got != name && std::any_of(params.begin(), params.end(), [&](auto& q) { return q.first == got; }))
            r.error(tensor + " is missing (found '" + got + "' in its place)");
        if (got != name) r.error("unknown tensor '" + got + "'");
        long rows = 0, cols = 0;
        std::string rw = r.expect("the rows of " + name), cw = r.expect("the columns of " + name);
        if (!parse_whole(rw, 0, 1000000000, rows) || !parse_whole(cw, 0, 1000000000, cols) || rows != m.rows ||
            cols != m.cols)
            r.error(tensor + " has shape (" + rw + ", " + cw + "); this configuration needs " + shape_text(m));
        read_values(r, tensor, m);
    }
}

// The model a checkpoint holds; its data settings, training settings and state and its training file into the
// other arguments. `where` begins every message.
inline Transformer read_checkpoint(std::istream& in, const std::string& where, DataConfig& d, TrainConfig& t,
                                   TrainState& state, TrainFile& file) {
    WordReader r{in, where, 1, ""};
    std::string magic = r.next();
    if (magic != "sorter-checkpoint")
        r.error("not a sorter checkpoint (the first word should be 'sorter-checkpoint', found '" + magic + "')");
    std::string version = r.expect("the format version");
    if (version != "1" && version != "2" && version != "3")
        r.error("format version " + version + " is not supported (this program reads versions 1, 2 and 3)");
    ModelConfig c;
    read_header(r, c, d, version == "3");
    long count = r.whole("tensors", 1, 1000);
    check_room_for(r, c);
    Transformer model(c, 0);
    read_tensors(r, model, count);
    t = TrainConfig(), state = TrainState(t, 1), file = TrainFile();  // version 1 keeps no training: --steps starts
                                                                     // afresh with the training flags' defaults
    std::string w = r.next(), last = version == "1" ? "'end'" : "'training'";
    if (w.empty()) r.error("the file ends early (truncated): expected " + last);
    if (w == "tensor") r.error("unknown tensor '" + r.next() + "' after the last one this configuration has");
    if (version != "1" && w != "training") r.error("expected 'training' after the last tensor, found '" + w + "'");
    if (version != "1") read_training(r, model, t, state, file, version == "3");
    if (version != "1") w = r.expect("'end'");
    if (w != "end") r.error("expected 'end', found '" + w + "'");
    w = r.next();
    if (!w.empty()) r.error("unexpected '" + w + "' after 'end'");
    return model;
}
inline Transformer load_checkpoint(const std::string& path, DataConfig& d, TrainConfig& t, TrainState& state,
                                   TrainFile& file) {  // --load FILE
    std::ifstream in = open_input(path, "--load " + path);
    return read_checkpoint(in, "--load " + path, d, t, state, file);
}


// ---------------------------------------------------------------------------------------------
// --dump-step FILE: the first step before its update, for reference/torch_sorter.py: lr, each example and
// its logits, dropout's masks (when on), the loss (batch_loss's, as train_step sums it, so the same to the last
// bit; label-smoothed when smoothing is on, as PyTorch's loss is), the model as a checkpoint.
inline std::string ids_text(const std::vector<int>& tokens) {  // {3, 1, 0} -> "3 1 0"
    std::vector<std::string> words;
    for (int t : tokens) words.push_back(std::to_string(t));
    return join(words, " ");
}
// Dropout's masks as the step draws them, for the twin to replay, each (rows, cols) with its place's name:
// the embeddings', each sublayer's, and each attention's (its heads' (T, S) factors stacked, sequence by
// sequence, head by head). A place with nothing dropped is left out.
inline std::vector<std::pair<std::string, Matrix>> dropout_masks(const Transformer& model) {
    std::vector<std::pair<std::string, Matrix>> masks = {{"embed.source", model.source_keep},
                                                         {"embed.target", model.target_keep}};
    auto heads = [](const MultiHeadAttention& attn) {
        std::vector<Matrix> keeps;
        for (const AttentionCache& head : attn.heads) keeps.push_back(head.keep);
        return attn.heads[0].keep.empty() ? Matrix() : stack_rows(keeps);
    };
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        const EncoderBlock& b = model.encoder[i];
        std::string name = "encoder." + std::to_string(i);
        masks.insert(masks.end(), {{name + ".attn_sub", b.attn_sub.keep}, {name + ".self_attn", heads(b.self_attn)},
                                   {name + ".ffn_sub", b.ffn_sub.keep}});
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        const DecoderBlock& b = model.decoder[i];
        std::string name = "decoder." + std::to_string(i);
        masks.insert(masks.end(), {{name + ".self_sub", b.self_sub.keep}, {name + ".self_attn", heads(b.self_attn)},
                                   {name + ".cross_sub", b.cross_sub.keep}, {name + ".cross_attn", heads(b.cross_attn)},
                                   {name + ".ffn_sub", b.ffn_sub.keep}});
    }
    masks.erase(std::remove_if(masks.begin(), masks.end(), [](auto& m) { return m.second.empty(); }), masks.end());
    return masks;
}
inline void dump_step(const std::string& path, Transformer& model, const std::vector<Example>& batch, double lr,
                      const DataConfig& d, const TrainConfig& t, const TrainState& state, const TrainFile& file) {
    Inputs in = inputs_of(batch, 0, batch.size());
    const Rng masks = model.dropout_draws;  // the step will draw the same masks again from here
    model.train(true);                      // as train_step runs the batch: one stack of rows, dropout on
    Matrix logits = model.forward(in.sources, in.targets_in);  // (n_seq T, vocab)
    model.train(false);
    model.dropout_draws = masks;
    Matrix unused(logits.rows, logits.cols);  // the gradient, not needed here
    const Loss loss = batch_loss(logits, batch, t.label_smoothing, unused);
    const int T = logits.rows / int(batch.size());
    write_atomically(path, "--dump-step", [&](FILE* f) {
        std::fprintf(f, "sorter-step 1\nlr %.17g\nexamples %zu\n", lr, batch.size());
        for (std::size_t i = 0; i < batch.size(); i++) {
            const Example& e = batch[i];
            Matrix logits_e = take_block(logits, int(i) * T, T, 0, logits.cols);
            std::fprintf(f, "example %zu\nsource %s\ntarget_in %s\ntarget %s\nlogits %d %d\n", i,
                         ids_text(e.source).c_str(), ids_text(e.target_in).c_str(), ids_text(e.target).c_str(),
                         logits_e.rows, logits_e.cols);
            write_matrix(f, logits_e);
        }
        std::vector<std::pair<std::string, Matrix>> kept = dropout_masks(model);
        if (!kept.empty()) std::fprintf(f, "masks %zu\n", kept.size());  // only with dropout on
        for (auto& [name, keep] : kept) {
            std::fprintf(f, "mask %s %d %d\n", name.c_str(), keep.rows, keep.cols);
            write_matrix(f, keep);
        }
        std::fprintf(f, "loss %.17g\ncheckpoint\n", loss.followed);  // the loss training follows
        write_checkpoint(f, model, d, t, state, file);
    });
}
