// workbench/web_form.hpp -- the page's form (make web): the flag table's rows the page takes, what a command line
// sets, and the shortest command line that sets it. The page (workbench/web.html) builds its settings from form_json()
// and asks settings_json() after each edit; web.hpp answers with them. Tests: workbench/web_form_test.cpp.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "options.hpp"

// ---------------------------------------------------------------------------------------------
// The flags the page takes
// ---------------------------------------------------------------------------------------------
// Flags the page does not take: they name files, print to a terminal or end the run, and its own buttons do the
// rest (threads: the page's worker is one thread, and a thread count changes no result).
const std::vector<std::string> PAGE_REFUSED = {"--save", "--load", "--report", "--svg", "--train-data", "--dump-step",
                                               "--sort", "--bench", "--speed", "--step-cost", "--demo", "--help", "--save-every",
                                               "--finish", "--params", "--show-pe", "--trace-shapes", "--inspect",
                                               "--show-attention", "--numbers", "--test-len", "--threads",
                                               "--quantize", "--save-adapters", "--adapters"};
// (--quantize: the page's own button, on its model; the adapters' files: its Download buttons)
inline bool page_takes(const Flag& f) {
    return std::find(PAGE_REFUSED.begin(), PAGE_REFUSED.end(), f.name) == PAGE_REFUSED.end();
}
// A command line of the page's flags; `opened`: the name of the checkpoint it runs on, as --load names it.
inline Options page_options(std::vector<std::string> words, const std::string& opened = "") {
    for (const std::string& w : words)
        if (w.rfind("--", 0) == 0 && find_flag(w) && !page_takes(*find_flag(w)))
            fail(w + " is not for the page: its buttons save, load and decode");
    if (!opened.empty()) words.insert(words.begin(), {"--load", opened});
    return parse_options(words);
}
// Whether a group's rows work on a loaded model alone (--lora's): the program refuses its first row without --load
// FILE, and takes it with one. The page offers them once a checkpoint is opened.
inline bool needs_checkpoint(const FlagGroup& g) {
    const auto first = std::find_if(g.flags.begin(), g.flags.end(), page_takes);
    if (first == g.flags.end() || first->value.empty()) return false;
    const std::string& kind = first->value;  // a value the row takes: 1, or a choice's first name
    const std::string value = kind == "N" || kind == "X" ? "1" : kind.substr(0, kind.find('|'));
    auto taken = [&](std::vector<std::string> words) {
        try { return parse_options(words), true; } catch (const UsageError&) { return false; }
    };
    return !taken({first->name, value}) && taken({"--load", "FILE", first->name, value});
}

// ---------------------------------------------------------------------------------------------
// The form: the flag table's rows, and what a command line sets
// ---------------------------------------------------------------------------------------------
// The page's form, from the flag table: the groups and their rows the page takes, each with its kind (what the
// row's value is: "N" a whole number, "X" a number, "a|b|c" a choice, none a switch), names and help, whether a
// checkpoint fixes it and whether it fine-tunes a loaded one; a group says whether it needs a loaded model:
// [{"title":"Model","needs_checkpoint":false,"flags":[{"name":"--d-model","kind":"whole",...},...]},...].
inline std::string form_json() {
    std::string groups;
    for (const FlagGroup& g : flag_table()) {
        std::string rows;
        for (const Flag& f : g.flags) {
            if (!page_takes(f)) continue;
            std::string kind = f.value.empty() ? "switch" : f.value == "N" ? "whole" : f.value == "X" ? "number"
                                                                                                     : "choice";
            std::vector<std::string> names;  // a choice's value lists its names: "relu|gelu|swiglu"
            for (std::size_t at = 0, bar; kind == "choice" && at <= f.value.size(); at = bar + 1) {
                bar = std::min(f.value.find('|', at), f.value.size());
                names.push_back(f.value.substr(at, bar - at));
            }
            rows += fmt("%s{\"name\":%s,\"kind\":\"%s\",\"names\":%s,\"help\":%s,\"checkpoint\":%s,"
                        "\"fine_tunes\":%s}", rows.empty() ? "" : ",", json_text(f.name).c_str(), kind.c_str(),
                        json_list(names, json_text).c_str(), json_text(f.help).c_str(),
                        f.fixed_by_checkpoint ? "true" : "false", f.fine_tunes ? "true" : "false");
        }
        if (!rows.empty())
            groups += fmt("%s{\"title\":%s,\"needs_checkpoint\":%s,\"flags\":[%s]}", groups.empty() ? "" : ",",
                          json_text(g.title).c_str(), needs_checkpoint(g) ? "true" : "false", rows.c_str());
    }
    return "[" + groups + "]";
}

// What a run's options set, one line a flag the page takes ("--pos rope"; "" for a switch left off): two command
// lines that give the same lines ask for the same run.
inline std::vector<std::string> page_settings(const Options& o) {
    std::vector<std::string> given;
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags)
            if (page_takes(f)) given.push_back(f.as_given(o));
    return given;
}
// A command line's words, flag by flag: {{"--pos", "rope"}, {"--rmsnorm"}}.
inline std::vector<std::vector<std::string>> flag_words(const std::vector<std::string>& words) {
    std::vector<std::vector<std::string>> flags;
    for (const std::string& w : words)
        if (flags.empty() || w.rfind("--", 0) == 0) flags.push_back({w});
        else flags.back().push_back(w);
    return flags;
}
inline std::vector<std::string> joined(const std::vector<std::vector<std::string>>& flags) {
    std::vector<std::string> words;
    for (const auto& f : flags) words.insert(words.end(), f.begin(), f.end());
    return words;
}
// The same command with only the flags that matter: a flag goes when the run is the same without it ("--pos
// sinusoidal", the default; "--rmsnorm" after --llama, which sets it).
inline std::vector<std::string> shortest_command(const std::vector<std::string>& words) {
    const std::vector<std::string> wanted = page_settings(page_options(words));
    std::vector<std::vector<std::string>> flags = flag_words(words);
    for (std::size_t k = 0; k < flags.size();) {
        std::vector<std::vector<std::string>> without = flags;
        without.erase(without.begin() + long(k));
        bool same = false;
        try { same = page_settings(page_options(joined(without))) == wanted; } catch (const UsageError&) {}
        if (same) flags = without; else k++;
    }
    return joined(flags);
}
// The command line of a model's settings (a checkpoint's): flag by flag in the table's order, each that changes the
// run and is allowed there (a decoder-only model's 0 encoder blocks are --arch's, not --enc-layers 0's).
inline std::vector<std::string> command_of(const Options& o) {
    const std::vector<std::string> wanted = page_settings(o);
    std::vector<std::string> words;
    for (int pass = 0; pass < 3; pass++)
        for (const FlagGroup& g : flag_table())
            for (const Flag& f : g.flags) {
                const std::string given = f.as_given(o);
                if (!page_takes(f) || !f.fixed_by_checkpoint || given.empty() ||
                    f.as_given(page_options(words)) == given)
                    continue;
                std::vector<std::string> more = words, add = split_words(given);
                more.insert(more.end(), add.begin(), add.end());
                try { page_options(more); words = more; } catch (const UsageError&) {}
            }
    return shortest_command(words);
}
// settings(flags): {"values":{"--d-model":"16","--rmsnorm":"on",...},"command":"--pos rope"}: each flag the page
// takes as the run would have it ("" for a switch off, or a value that follows another's, as --min-len), and the
// shortest command line asking for the same run.
inline std::string settings_json(const std::string& text) {
    const std::vector<std::string> words = split_words(text), command = shortest_command(words);
    const Options o = page_options(words);
    std::string values;
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags) {
            if (!page_takes(f)) continue;
            std::string given = f.as_given(o), value;
            if (f.value.empty()) value = !given.empty() || std::count(command.begin(), command.end(), f.name) ? "on" : "";
            else if (!given.empty()) value = given.substr(given.find(' ') + 1);
            values += fmt("%s%s:%s", values.empty() ? "" : ",", json_text(f.name).c_str(), json_text(value).c_str());
        }
    return fmt("{\"values\":{%s},\"command\":%s}", values.c_str(), json_text(join(command, " ")).c_str());
}

