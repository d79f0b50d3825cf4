// workbench/quantize.hpp -- --quantize BITS: a trained model's matrices of a product as whole numbers (matrix.hpp's
// last section writes out the rules and the integer product), the error that costs, and how a checkpoint keeps them.
// Inference only: a quantized model evaluates, decodes and is inspected, never trained (its float adapters may be:
// --lora, chapter 12). Tests: quantize_test.cpp.
#pragma once

#include <cfloat>
#include <cstdio>
#include <string>

#include "files.hpp"

// The tensors quantized: every matrix of a product, by its name's last part: attention's W_q W_k W_v W_o, the
// feed-forward's W_1 W_2 (W_3), out.W, and the embedding table (read by the tied output projection, or looked up).
// Norms, biases and learned positions stay float64.
inline std::string last_part(const std::string& name) { return name.substr(name.rfind('.') + 1); }
inline bool is_product_matrix(const std::string& name) {
    const std::string last = last_part(name);
    return last == "table" || last[0] == 'W';
}
// A Linear's W (d_in, d_out) is kept as its transpose (d_out, d_in), each output's weights in a row; the table
// (vocab, d_model) is that already: the tied product's rows are the tokens.
inline bool kept_transposed(const std::string& name) { return last_part(name) != "table"; }
// Tensor `name`'s integers Q, kept by the model (chapter 09's QuantizedParts), and p's values, what they stand for.
// (Then multiply_in_integers, once the model has them all, gives each Linear its IntegerProduct.)
inline void set_quantized(Transformer& model, Param& p, const std::string& name, Quantized Q) {
    Matrix W = dequantize(Q);  // what the float readers of the weights see (--inspect, the report)
    p.value = kept_transposed(name) ? transpose(W) : W;
    pack_weights(Q);  // engine/integers.hpp's layout for its product, once
    model.integers[name] = std::make_shared<const Quantized>(std::move(Q));
}
// A valid width: 2 to 8 bits.
inline bool valid_bits(long bits) { return bits >= 2 && bits <= 8; }
// Why a quantized model does not train (./sorter --load FILE --steps N, and the page's Train), `file` naming it.
inline std::string cannot_train_text(const std::string& file, int bits) {
    return fmt("%s holds a model quantized to %d bits, which cannot train: train the float model it was quantized "
               "from (the --load file given to --quantize), then quantize it again; or train adapters over it "
               "(--lora R, chapter 12)", file.c_str(), bits);
}

// A scale is a float32, as runq.c keeps it: a double below FLOAT_LIMIT in size rounds to a finite float (at most
// FLT_MAX, 3.40282347e+38); from it on, to inf (FLT_MAX and half its last step: the tie goes to the even, inf). A
// file's scale and a model's weights are checked against it, so that no scale becomes inf and no product NaN.
constexpr double FLOAT_LIMIT = double(FLT_MAX) + 0x1p103;
inline bool fits_float(double v) { return std::fabs(v) < FLOAT_LIMIT; }
// What group_scale divides a group's largest weight by at `bits`: its largest scale is the largest weight over this.
inline double scale_divisor(int bits) { return -double(levels_of(bits).lowest); }  // chapter 09's rule

// Why the model cannot be quantized to `bits` ("" when it can): a weight so large that its group's scale would not
// fit a float32. Every matrix is checked before any is quantized, so nothing is printed of a model that is refused.
inline std::string unquantizable(Transformer& model, int bits) {
    for (auto& [name, p] : model.parameters()) {
        if (!is_product_matrix(name)) continue;
        double largest = 0.0;
        for (double v : p->value.data) largest = std::max(largest, std::fabs(v));
        if (!fits_float(largest / scale_divisor(bits)))
            return fmt("--quantize %d: tensor '%s' holds a weight of %g, whose group's scale %g would not fit a "
                       "float32 (at most %g: at %d bits a weight may be %g in size); this model cannot be quantized: "
                       "train it again, or keep it in float64", bits, name.c_str(), largest,
                       largest / scale_divisor(bits), double(FLT_MAX), bits, FLT_MAX * scale_divisor(bits));
    }
    return "";
}

// Quantize every matrix of a product, printing each one's largest error and the half step it stays within.
inline void quantize_model(Transformer& model, int bits) {
    if (std::string why = unquantizable(model, bits); !why.empty()) fail(why);
    double worst = 0.0;
    for (auto& [name, p] : model.parameters()) {
        if (!is_product_matrix(name)) continue;
        const Matrix Wt = kept_transposed(name) ? transpose(p->value) : p->value;
        Quantized Q = quantize(Wt, bits);
        const Matrix back = dequantize(Q);
        double error = 0.0, half_step = 0.0;
        for (std::size_t i = 0; i < Wt.data.size(); i++) error = std::max(error, std::fabs(Wt.data[i] - back.data[i]));
        for (double s : Q.scales) half_step = std::max(half_step, std::fabs(s) / 2);
        std::printf("quantized %-28s %-10s to %d bits, groups of %2d: max error %.6f (largest half step %.6f)\n",
                    name.c_str(), shape_text(p->value).c_str(), bits, Q.group, error, half_step);
        worst = std::max(worst, error);
        set_quantized(model, *p, name, std::move(Q));
    }
    multiply_in_integers(model);
    model.config.bits = bits;
    std::printf("max error in any group: %.6f\n", worst);
}

// In a checkpoint (version 7, `bits` above 0), a quantized tensor's values are its kept rows, one a line: the row's
// group scales (float32 values, as runq.c keeps them: "%.9g" reads back to the same float), then its whole numbers.
inline void write_quantized(FILE* f, const Quantized& Q) {
    for (int r = 0; r < Q.rows; r++) {
        for (int g = 0; g < Q.groups(); g++) std::fprintf(f, "%.9g ", Q.scales[std::size_t(r) * Q.groups() + g]);
        for (int c = 0; c < Q.cols; c++)
            std::fprintf(f, "%d%c", int(Q.q[std::size_t(r) * Q.cols + c]), c + 1 == Q.cols ? '\n' : ' ');
    }
}
inline void read_quantized(WordReader& r, Transformer& model, const std::string& name, Param& p, int bits) {
    const Matrix& W = p.value;
    Quantized Q;
    Q.rows = kept_transposed(name) ? W.cols : W.rows, Q.cols = kept_transposed(name) ? W.rows : W.cols;
    Q.bits = bits, Q.group = group_for(bits, Q.cols);
    const long lowest = levels_of(bits).lowest, highest = levels_of(bits).highest;
    const std::string what = "tensor '" + name + "'";
    for (int row = 0; row < Q.rows; row++) {
        for (int g = 0; g < Q.groups(); g++) {
            std::string w = r.next();
            double scale = 0;
            if (w.empty()) r.error("the file ends early (truncated) inside " + what);
            if (!number_syntax(w, false))  // nan, inf, a word
                r.error(what + fmt(" row %d: scale '", row) + w + "' is not a finite number");
            scale = std::strtod(w.c_str(), nullptr);  // beyond a double's range: inf; below it, 0 (as a float would be)
            if (!fits_float(scale))
                r.error(what + fmt(" row %d: scale ", row) + w + fmt(" is beyond float32's range (a scale is kept as "
                                                                     "a float32, at most %.9g in size)", FLT_MAX));
            Q.scales.push_back(double(float(scale)));  // the float "%.9g" was written from
        }
        for (int c = 0; c < Q.cols; c++) {
            std::string w = r.next();
            long q = 0;
            if (w.empty()) r.error("the file ends early (truncated) inside " + what);
            const bool negative = w.size() > 1 && w[0] == '-';  // parse_whole reads digits alone
            if (!parse_whole(negative ? w.substr(1) : w, negative ? 1 : 0, negative ? -lowest : highest, q))
                r.error(what + fmt(" row %d: '", row) + w + fmt("' is not a whole number from %ld to %ld (%d bits)",
                                                                lowest, highest, bits));
            Q.q.push_back(int8_t(negative ? -q : q));
        }
    }
    set_quantized(model, p, name, std::move(Q));
}
