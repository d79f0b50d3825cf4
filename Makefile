# sorter -- build, test, benchmark.
#   make             build ./sorter
#   make test        build and run the gradient checks and behaviour tests (doctest)
#   make gradcheck   only the gradient checks of tests.cpp, with their table (seconds after editing a backward)
#   make exercises   the backwards a class writes itself; make exercise NAME=... DIR=... a student's copy, make check in it
#   make check-libm  what ./sorter imports from the system's maths library: exact functions only (make and make test check too)
#   make sanitize    the tests (two long ones aside) under Address- and UndefinedBehaviorSanitizer, the thread tests under ThreadSanitizer
#   make course      run every command pasted in README.md and docs/*.md again; fail if an output drifted
#   make check-report  the --report page in headless Chromium (needs chromium): errors, markup, screenshots
#   make bench       speed table (see docs/performance.md)
#   make attention-cost  plain attention against --attention flash: a step's memory and time, T = 64 .. 1024
#   make quantize-table  float64, 8 and 4 bits (and 6, 3, 2): accuracy of 3 seeds x 3 sizes x 2 tasks, and the plot
#   make lora-table  LoRA at R = 1, 2, 4, 8 on float, 8- and 4-bit bases against every weight, 3 seeds, and the plot
#   make reference   the PyTorch twin checks our numbers in float64 (reference/; needs python3-torch)
#   make compare     sorter beside the PyTorch twin, on one thread and on all cores (reference/; needs python3-torch)
#   make fuzz        the libFuzzer targets of fuzz/, FUZZ_SECONDS each, two at a time (default 60; needs clang)
#   make signals     Ctrl-C, kill, hang-up and kill -9 at random moments of real runs, every output checked
#   make web         sorter.html: one page that trains sorter live in a browser (needs emscripten)
#   make check-web   that page in headless Chromium: trains the default model, screenshots (needs node, chromium)
#
# Any C++17 compiler: make CXX=clang++, make CXX="clang++ -stdlib=libc++", make CXX=aarch64-linux-gnu-g++.
# GNU make 3.81 (macOS's own) is enough.
CXX      ?= g++
ifeq ($(MAKELEVEL),0)  # the test objects build side by side (a make run from a recipe shares these jobs)
MAKEFLAGS += --jobs=$(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)
endif
# -march=native: use this CPU's vector instructions (the binary may not run on another machine), where
# the compiler accepts it. Cross compilers and Apple's clang before version 15 refuse it: they get -O3
# alone, and the same numbers (-ffp-contract=off below). The probe runs once per make.
NATIVE   := $(shell echo 'int main() {}' | $(CXX) -march=native -x c++ -c -o /dev/null - 2>/dev/null && \
                    echo -march=native)
# -falign-functions=64: every function starts a cache line, so the hot loops' speed does not move by a
# few percent when unrelated code grows or shrinks (measured: 2.3% on the default run, from one edit).
CXXFLAGS ?= $(strip -O3 $(NATIVE) -falign-functions=64 -Wall -Wextra -pedantic)
# make WERROR=-Werror, make test WERROR=-Werror: any warning fails the build (CI builds so).
ifneq ($(WERROR),)
CXXFLAGS += $(WERROR)
endif
# The flags the numbers depend on stay out of what a user overrides (make CXXFLAGS=...):
# -ffp-contract=off: never fuse a * b + c into one FMA instruction. A fused multiply-add rounds
# once instead of twice, which changes every result in the last bit, and training then drifts
# away from the figures printed by a plain build. With it off, every build computes the same numbers.
# -fno-math-errno: std::sqrt need not set errno, so loops that take it (Adam's update) run in vector lanes; a
# square root and a division are rounded exactly as IEEE says in a lane or alone, so no number changes.
# -pthread: --threads runs std::threads (older C libraries and some systems link them only with this flag).
FIXED    := -std=c++17 -ffp-contract=off -fno-math-errno -pthread
# The tutorial: its first part (the three headers), its later chapters (chapters/*.hpp), and beneath them engine/: the
# fast kernels and the pool they run on. A chapter's tests and the engine's sit beside them (chapters/*_test.cpp,
# engine/*_test.cpp), built with the program's flags at -O2 (make test, below): the numbers ./sorter computes.
CHAPTERS     := $(wildcard chapters/*.hpp)
ENGINE       := $(wildcard engine/*.hpp)
BESIDE_TESTS := $(wildcard chapters/*_test.cpp) $(wildcard engine/*_test.cpp)
HEADERS  := matrix.hpp model.hpp train.hpp $(CHAPTERS) $(ENGINE)
# The program's parts (workbench/*.hpp) and their tests beside them (workbench/*_test.cpp).
WORKBENCH       := $(wildcard workbench/*.hpp)
WORKBENCH_TESTS := $(wildcard workbench/*_test.cpp)
# doctest, where Debian, Ubuntu and Fedora (/usr/include), Homebrew (/opt/homebrew/include on Apple
# silicon, /usr/local/include on Intel) and MacPorts (/opt/local/include) put it; or name it yourself:
# make test DOCTEST=/path/to/doctest/doctest.h. Its folder is searched after the compiler's own.
DOCTEST_DIRS := /usr/include /usr/local/include /opt/homebrew/include /opt/local/include
DOCTEST  ?= $(firstword $(wildcard $(DOCTEST_DIRS:%=%/doctest/doctest.h)))
DOCTEST_INCLUDE = $(addprefix -idirafter ,$(filter-out /usr/include,$(patsubst %/doctest/doctest.h,%,$(DOCTEST))))

.PHONY: all test check-libm sanitize-run-address sanitize-run-thread gradcheck exercises exercise check blank regrade mistakes FORCE course check-report sanitize bench attention-cost quantize-table lora-table reference compare fuzz signals clean doctest web check-web maths

all: sorter

# The flags are also compiled in, so that ./sorter --bench can print what it was built with.
# Then what it imports from the system's maths library: the exact functions only (floor, sqrt, ...), every
# transcendental one from maths:: (fuzz/libm-imports.sh); else the build is refused, and removed.
sorter: main.cpp $(HEADERS) $(WORKBENCH) Makefile
	$(CXX) $(FIXED) $(CXXFLAGS) -DSORTER_CXXFLAGS='"$(CXX) $(FIXED) $(CXXFLAGS)"' -o $@ main.cpp
	@CXX="$(CXX)" fuzz/libm-imports.sh $@ >/dev/null || { CXX="$(CXX)" fuzz/libm-imports.sh $@; rm -f $@; exit 1; }

# When doctest is missing: on Debian or Ubuntu as root, install it; otherwise say how, for this system.
doctest:
	@if [ -z "$(DOCTEST)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "doctest is missing: installing Debian's doctest-dev"; \
	  (apt-get install -y -qq doctest-dev >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq doctest-dev >/dev/null)) || true; \
	fi
	@found="$(DOCTEST)"; \
	 for dir in $(DOCTEST_DIRS); do \
	   [ -n "$$found" ] || [ ! -f $$dir/doctest/doctest.h ] || found=$$dir/doctest/doctest.h; \
	 done; \
	 case "$$found" in \
	   */doctest/doctest.h) test -f "$$found" && exit 0; \
	     echo "error: DOCTEST=$$found: no such file"; exit 1;; \
	   ?*) echo "error: DOCTEST=$$found: name the header inside its doctest/ folder," \
	         "as in DOCTEST=/path/to/doctest/doctest.h (the tests include <doctest/doctest.h>)"; exit 1;; \
	 esac; \
	 if [ "$$(uname -s)" = Darwin ]; then how="brew install doctest (or, with MacPorts: sudo port install doctest)"; \
	 elif command -v apt-get >/dev/null; then how="sudo apt-get install doctest-dev"; \
	 elif command -v dnf >/dev/null; then how="sudo dnf install doctest-devel"; \
	 else how="get doctest/doctest.h from github.com/doctest/doctest,"; \
	      how="$$how then make test DOCTEST=/path/to/doctest/doctest.h"; fi; \
	 echo "error: doctest not found (looked in $(DOCTEST_DIRS)). Install it with: $$how"; exit 1

# make test: one binary, from four units that build side by side on two cores (the biggest first), run as two
# processes (below). tests.cpp is the tutorial's lab notebook (the three headers, and chapter 10's cache), at -O1:
# its training runs the blocks as beside-tests.o compiled them (below), so it runs as fast as at -O2 (6.9 s and 6.8)
# and compiles in 14 CPU seconds (-O2: 18); -ffp-contract=off makes the numbers the same at any -O level. chapters/*_test.cpp and engine/*_test.cpp, with the program's flags at -O2 too
# (-march=native where the program has it; 15 CPU seconds where -O3 took 26, the same numbers). The
# workbench's tests, workbench/*_test.cpp beside the headers they test, in one unit at -O0 (they read and write
# files and make short runs; at -O1 they took 51 CPU seconds to compile, at -O0 27, and the runs are as quick,
# since what they compute comes from beside-tests.o; as two units, each compiling the program again, 36).
# doctest's main() is compiled once, into doctest-main.o. beside-tests.o is linked first: a function compiled in more than one unit
# is kept from the first (the linker's rule), so every unit runs the kernels and the blocks as they are tested.
# DOCTEST_CONFIG_SUPER_FAST_ASSERTS: a CHECK is a call, not a try block of its own (a tenth of the units' compile
# time); an exception thrown inside a CHECK's expression still fails its test case, as an unexpected exception.
TEST_FLAGS := -DDOCTEST_CONFIG_SUPER_FAST_ASSERTS
doctest-main.o: | doctest
	printf '#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN\n#include <doctest/doctest.h>\n' | \
	  $(CXX) -std=c++17 -O1 $(DOCTEST_INCLUDE) -x c++ -c -o $@ -
tests.o: tests.cpp $(HEADERS) Makefile | doctest
	$(CXX) $(FIXED) $(CXXFLAGS) -O1 $(TEST_FLAGS) $(DOCTEST_INCLUDE) -c -o $@ tests.cpp
workbench-tests.o: $(WORKBENCH_TESTS) main.cpp $(HEADERS) $(WORKBENCH) Makefile | doctest
	printf '#include "%s"\n' $(WORKBENCH_TESTS) | \
	  $(CXX) $(FIXED) $(CXXFLAGS) -O0 $(TEST_FLAGS) -I. $(DOCTEST_INCLUDE) -x c++ -c -o $@ -
beside-tests.o: $(BESIDE_TESTS) $(HEADERS) Makefile | doctest
	printf '#include "%s"\n' $(BESIDE_TESTS) | \
	  $(CXX) $(FIXED) $(CXXFLAGS) -O2 $(TEST_FLAGS) -I. $(DOCTEST_INCLUDE) -x c++ -c -o $@ -
TEST_UNITS := beside-tests.o tests.o workbench-tests.o doctest-main.o
tests: workbench-tests.o tests.o beside-tests.o doctest-main.o
	$(CXX) $(FIXED) $(CXXFLAGS) -o $@ $(TEST_UNITS)
# The lab notebook and the engine's tests alone (CI runs them for ARM64 under qemu, which cannot start ./sorter
# as the workbench's tests do).
tests-lab: tests.o beside-tests.o doctest-main.o
	$(CXX) $(FIXED) $(CXXFLAGS) -o $@ beside-tests.o tests.o doctest-main.o

# Before the tests run: what the tutorial's blocks import from the system's maths library, as the engine's tests
# compile them (every block a model can be built with; the lab notebook itself compares maths:: with std::).
# The run is two processes side by side, one a core, of about the same length (ten seconds each here): the lab
# notebook's, the chapters' and the engine's tests with the workbench's signals tests (which wait on runs they
# start), and the rest of the workbench's, printed after them; make test fails if either does. The two halves are
# one list's -sf and -sfe, so that no test is in neither. ./tests alone runs them all in one.
comma := ,
SECOND_HALF := $(subst $() ,$(comma),$(patsubst %,*%,$(filter-out workbench/signals_test.cpp,$(WORKBENCH_TESTS))))
test: tests
	@CXX="$(CXX)" fuzz/libm-imports.sh beside-tests.o
	@./tests -sf='$(SECOND_HALF)' > tests-second-half.log 2>&1 & second=$$!; \
	 ./tests -sfe='$(SECOND_HALF)'; first_status=$$?; wait $$second; second_status=$$?; \
	 cat tests-second-half.log; rm -f tests-second-half.log; test $$first_status -eq 0 && test $$second_status -eq 0

# make check-libm BINARY=file [NM=...]: what a build imports from the system's maths library (CI: every build).
BINARY ?= sorter
NM     ?= nm
check-libm: $(BINARY)
	@CXX="$(CXX)" NM="$(NM)" fuzz/libm-imports.sh $(BINARY)

# make gradcheck: the "gradient:" test cases of tests.cpp alone, every backward against central
# differences, one row per tensor. tests.cpp alone, built at -Og, so that after an edit to a backward
# the rebuild and the run take seconds.
gradcheck-tests: tests.cpp $(HEADERS) Makefile doctest-main.o
	$(CXX) $(FIXED) $(CXXFLAGS) -Og $(DOCTEST_INCLUDE) -o $@ tests.cpp doctest-main.o
# The checks run as two processes side by side, one on each of two cores: four of the whole-model
# checks (about half the work) in the background, their table printed after the others'.
# (doctest splits a filter at commas, so ? stands for the comma in the test names.)
GRADCHECK_HALF := gradient: whole model? 2*,gradient: whole model? default*,gradient: whole model? Norm*,$\
                  gradient: whole model? Positions::learned*,gradient: whole model? tied*
gradcheck: gradcheck-tests
	@echo "gradient check: every entry of every tensor against central differences (h = 3e-5); a row is wrong above 1e-6"
	@./gradcheck-tests -tc="$(GRADCHECK_HALF)" > gradcheck-half.log 2>&1 & half=$$!; \
	 ./gradcheck-tests -tc="gradient:*" -tce="$(GRADCHECK_HALF)"; rest=$$?; \
	 wait $$half; status=$$?; cat gradcheck-half.log; rm -f gradcheck-half.log; \
	 test $$rest -eq 0 && test $$status -eq 0

# Write it yourself (docs/course.md): a class writes a backward, and the check grades it (workbench/exercises.hpp,
# exercise_diagnosis.hpp, exercise_check.hpp, exercise_blocks.hpp, exercise_model.hpp, exercise_grade.hpp).
#   make exercises                    the list
#   make exercise NAME=softmax DIR=d  a student's copy in d, that answer cut out: no answer, no history; d/EXERCISE.md
#                                     says what to write, what to run and what to read
#   make check                        in the copy: the gradient checks and a short training run; the last line, the grade
#                                     (in the repository: make check NAME=softmax)
#   make blank                        in the copy: the blank gap back (the student's code kept in exercise-yours.txt)
#   make regrade COPY=d               in the repository: the gaps of the copy d checked in a clean hand-out of the same
#                                     exercise (d's own check could have been edited)
#   make mistakes                     in the repository: typical mistakes planted into copies, each graded by the
#                                     copy's make check: docs/course.md's table (about 20 minutes on two busy cores)
# The check is built alone, at -Og as make gradcheck, so that the rebuild after a student's edit and the run take
# seconds, and with the C++ library's bounds checks (-D_GLIBCXX_ASSERTIONS): an index out of range stops it, named.
# One unit (two would each compile the tutorial again), whose C++ library headers are precompiled once, by the first
# build (workbench/exercise_std.hpp); it runs the training on a second thread, beside the gradient checks.
EXERCISE_CHECK := workbench/exercises.hpp workbench/exercise_diagnosis.hpp workbench/exercise_check.hpp \
                  workbench/exercise_blocks.hpp workbench/exercise_model.hpp workbench/exercise_grade.hpp \
                  workbench/text.hpp
EXERCISE_FLAGS  = $(FIXED) $(CXXFLAGS) -Og -D_GLIBCXX_ASSERTIONS -I.
# A precompiled header is its compiler's own (clang refuses g++'s): exercise-check.flags names the compiler and the
# flags, rewritten only when they change, so that make CXX=clang++ after g++ makes it again.
exercise-check.flags: FORCE
	@echo '$(CXX) $(EXERCISE_FLAGS)' > $@.new; if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi
FORCE:
workbench/exercise_std.hpp.gch: workbench/exercise_std.hpp exercise-check.flags
	$(CXX) $(EXERCISE_FLAGS) -x c++-header -o $@ workbench/exercise_std.hpp
exercise-check: $(HEADERS) $(EXERCISE_CHECK) Makefile workbench/exercise_std.hpp.gch
	printf '#include "workbench/exercise_grade.hpp"\nint main(int argc, char** argv) { return exercises::run(argc, argv); }\n' | \
	  $(CXX) $(EXERCISE_FLAGS) -include workbench/exercise_std.hpp -x c++ -o $@ -
exercises: exercise-check
	@./exercise-check --list
# A student's copy has no git (no .git): there make exercise and make regrade say so at once, and build nothing.
GIT_HERE := $(wildcard .git)
exercise: $(if $(GIT_HERE),exercise-check)  # the files git tracks
	@test -n "$(GIT_HERE)" || { echo "make exercise: run it in the repository, a git clone (the copy takes the" \
	  "files git tracks; a student's copy has no git, and hands out nothing)"; exit 2; }
	@./exercise-check --hand-out "$(NAME)" "$(DIR)" $$(git ls-files 2>/dev/null) && \
	  ./exercise-check --page "$(DIR)"
check: exercise-check  # a graded fail (1) is a result, not an error: the grade is the last line
	@./exercise-check $(NAME) || test $$? -eq 1
blank:  # not ./exercise-check: it must work when the student's code does not compile
	@workbench/exercise_blank.sh
regrade: $(if $(GIT_HERE),exercise-check)
	@test -n "$(COPY)" || { echo "make regrade: name the student's copy: make regrade COPY=path"; exit 2; }
	@test -n "$(GIT_HERE)" && git rev-parse --is-inside-work-tree >/dev/null 2>&1 || \
	  { echo "make regrade: run it in the repository, which hands out the clean copy"; exit 2; }
	@names=$$(./exercise-check --gaps "$(COPY)") && clean=$$(mktemp -d) && \
	 ./exercise-check --hand-out "$$names" $$clean/copy $$(git ls-files) >/dev/null && \
	 ./exercise-check --transplant "$(COPY)" $$clean/copy && \
	 { $(MAKE) -s -C $$clean/copy check; status=$$?; rm -rf $$clean; exit $$status; }
exercise-mistakes: fuzz/exercise_mistakes.cpp $(EXERCISE_CHECK) Makefile doctest-main.o
	$(CXX) $(FIXED) $(CXXFLAGS) -O1 -I. $(DOCTEST_INCLUDE) -o $@ fuzz/exercise_mistakes.cpp doctest-main.o
# (A student's copy does not hold the mistakes: there it says so, and builds nothing.)
MISTAKES := $(wildcard fuzz/exercise_mistakes.cpp)
mistakes: $(if $(MISTAKES),exercise-check exercise-mistakes)
	@test -n "$(MISTAKES)" || { echo "make mistakes: run it in the repository (a student's copy does not hold" \
	  "fuzz/exercise_mistakes.cpp, the mistakes it plants)"; exit 2; }
	@./exercise-mistakes  # each mistake finds its place in the answer
	@dir=$$(mktemp -d) && git ls-files > $$dir/files && \
	 MISTAKES_DIR=$$dir ./exercise-mistakes --no-skip -tc='*the copies*' >/dev/null && \
	 for copy in $$dir/[0-9]*; do \
	   (cd $$copy && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS $(MAKE) -s check > check.out 2>&1); \
	 done; \
	 MISTAKES_DIR=$$dir ./exercise-mistakes --no-skip -tc='*the grades*'; status=$$?; rm -rf $$dir; exit $$status

# make test's three units again, sanitized, built side by side: the chapters' and the engine's tests and the lab
# notebook at -O1 (what trains and decodes: beside-tests first in the link, as in make test, so every unit runs the
# blocks as they were compiled there), and the workbench's tests in one unit at -O0 (they read and write files and
# start ./sorter; on a busy machine the first of the two units at -O1 they were in took 211 CPU seconds to compile, the
# one at -O0 85, and 57 alone).
# float-cast-overflow: a NaN or an inf made an integer (g++ leaves it out of undefined; clang's undefined has it).
SANITIZE := -g1 -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
tests-sanitize-lab.o: tests.cpp $(HEADERS) Makefile | doctest
	$(CXX) $(FIXED) $(CXXFLAGS) -O1 $(SANITIZE) $(DOCTEST_INCLUDE) -c -o $@ tests.cpp
tests-sanitize-beside.o: $(BESIDE_TESTS) $(HEADERS) Makefile | doctest
	printf '#include "%s"\n' $(BESIDE_TESTS) | $(CXX) $(FIXED) $(CXXFLAGS) -O1 $(SANITIZE) -I. \
	  $(DOCTEST_INCLUDE) -x c++ -c -o $@ -
tests-sanitize-workbench.o: $(WORKBENCH_TESTS) main.cpp $(HEADERS) $(WORKBENCH) Makefile | doctest
	printf '#include "%s"\n' $(WORKBENCH_TESTS) | $(CXX) $(FIXED) $(CXXFLAGS) -O0 $(SANITIZE) -I. \
	  $(DOCTEST_INCLUDE) -x c++ -c -o $@ -
tests-sanitize: tests-sanitize-beside.o tests-sanitize-lab.o tests-sanitize-workbench.o doctest-main.o
	$(CXX) $(FIXED) $(CXXFLAGS) -O1 $(SANITIZE) -o $@ $^

# ThreadSanitizer on the pool's tests and the kernels (--threads: no data race between the pool's threads): the
# chapters' and the engine's tests, whose "threads:" cases train and decode a model on 1, 2, 3 and 8 threads.
tests-tsan: $(HEADERS) $(BESIDE_TESTS) Makefile doctest-main.o
	printf '#include "%s"\n' $(BESIDE_TESTS) | \
	  $(CXX) $(FIXED) $(CXXFLAGS) -O1 -g1 -fsanitize=thread $(DOCTEST_INCLUDE) -I. -x c++ -o $@ - -x none doctest-main.o

# The two runs side by side, each printed whole when it ends.
sanitize: tests-sanitize tests-tsan
	+@$(MAKE) --no-print-directory sanitize-run-address sanitize-run-thread
# Two halves side by side, as make test's but with the chapters' tests in the second and the whole runs' tests
# (run_test.cpp) in the first, which makes them even (side by side on a quiet machine 137 s, where the longer half had
# taken 209 before it moved and the four below were left out). Four slow tests run in
# make test alone, whose length is repetition: "a trained model sorts" (44 s here under the sanitizers) trains the
# blocks that the shorter trainings take through every line; the threads' same bits on 1, 2, 3 and 8 threads (108 s)
# runs under ThreadSanitizer below; a killed fine-tuning run finished (57 s: three runs, each three times) takes the
# lines of a killed run finished (15 s) and of the LoRA tests; a loaded model's scoring cut short by three signals
# (47 s) those of a Ctrl-C after training (13 s) and of an evaluation cut short.
ASAN_SECOND := $(subst $() ,$(comma),$(patsubst %,*%,$(filter-out workbench/signals_test.cpp workbench/run_test.cpp,$\
               $(WORKBENCH_TESTS)))),*chapters/*
ASAN_SKIPS  := training: a trained model sorts*,threads: training and decoding give the same bits*,$\
               --save-every and --finish: a killed fine-tuning run*,signals: a loaded model?s scoring*
sanitize-run-address: tests-sanitize
	@export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1; \
	 ./tests-sanitize -sf='$(ASAN_SECOND)' > tests-sanitize-second.log 2>&1 & second=$$!; \
	 ./tests-sanitize -sfe='$(ASAN_SECOND)' -tce='$(ASAN_SKIPS)' > tests-sanitize.log 2>&1; \
	 first=$$?; wait $$second; second=$$?; \
	 cat tests-sanitize.log tests-sanitize-second.log; rm -f tests-sanitize.log tests-sanitize-second.log; \
	 test $$first -eq 0 && test $$second -eq 0
sanitize-run-thread: tests-tsan
	@./tests-tsan -tc="threads:*,fast kernels:*" > tests-tsan.log 2>&1; \
	 status=$$?; cat tests-tsan.log; rm -f tests-tsan.log; exit $$status

# Every command pasted in README.md and docs/*.md, run again and compared with the page (timings masked).
course: sorter
	+@docs/check-course  # + : the page runs make too, which shares this make's jobs

# The --report page in headless Chromium: no console error, well-formed, screenshots to look at.
check-report: sorter
	@docs/check-report

# The same build as `make`, then the speed table (about 15 s; sorter alone, make compare adds PyTorch).
bench: sorter
	./sorter --bench

# About 5 minutes: docs/performance.md's table of attention in tiles, and its plot (docs/attention-cost.svg).
attention-cost: sorter
	docs/attention-cost

# About an hour on two shared cores: docs/performance.md's table of a quantized model's accuracy, docs/course.md's lab 33
# and its plot (docs/quantize-bits.svg).
quantize-table: sorter
	docs/quantize-table

lora-table: sorter
	docs/lora-table

# The PyTorch twin runs on the first python3 that has PyTorch: PYTHON when you set it, else python3 on
# your PATH, else /usr/bin/python3 (Debian's python3-torch is built for Debian's own python3). Without
# one, the targets say how to get it and skip (make test never needs PyTorch).
PYTHONS    = $(or $(PYTHON),python3 /usr/bin/python3)
TORCH_HINT = Debian or Ubuntu: sudo apt-get install python3-torch; elsewhere: python3 -m pip install torch
find_torch = for p in $(PYTHONS); do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; break; }; done
reference: sorter
	@py=$$($(find_torch)); if [ -n "$$py" ]; then $$py reference/torch_sorter.py --check; \
	 else echo "make reference: skipped: no python3 with PyTorch (tried $(PYTHONS)). $(TORCH_HINT)"; fi

compare: sorter
	@py=$$($(find_torch)); if [ -n "$$py" ]; then $$py reference/compare.py; \
	 else echo "make compare: skipped: no python3 with PyTorch (tried $(PYTHONS)). $(TORCH_HINT)"; fi

# Each target of fuzz/targets.cpp (one binary, fuzz/fuzz, built with clang's libFuzzer and both sanitizers) runs from
# its seed corpus for FUZZ_SECONDS. What it finds goes to fuzz/work/ (ignored by git), so the checked-in
# seeds stay as they are; a crash stops make with the input that caused it, saved there.
FUZZ_SECONDS  ?= 60
FUZZ_TARGETS  := checkpoint adapters train_data options pictures
FUZZ_CXX      ?= clang++
fuzz/fuzz: fuzz/targets.cpp $(HEADERS) $(WORKBENCH) Makefile
	$(FUZZ_CXX) $(FIXED) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ fuzz/targets.cpp

# Built once, then the targets run two at a time (make's jobs: one core each), each target's lines printed when it ends.
fuzz: fuzz/fuzz
	+@$(MAKE) --no-print-directory $(FUZZ_TARGETS:%=fuzz-run-%)
fuzz-run-%: fuzz/fuzz
	@mkdir -p fuzz/work/$*; \
	 FUZZ_TARGET=$* fuzz/fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	   -artifact_prefix=fuzz/work/$*- fuzz/work/$* fuzz/corpus/$* >fuzz/work/$*.log 2>&1; status=$$?; \
	 printf '== fuzz $*: $(FUZZ_SECONDS) s\n%s\n' "$$(grep -E '^(Done|stat::number_of_executed_units)' fuzz/work/$*.log)"; \
	 if [ $$status -ne 0 ]; then tail -n 40 fuzz/work/$*.log; echo "make fuzz: $* failed"; exit 1; fi

# make maths: matrix.hpp's maths::exp, log, sin, cos and pow against the C library, a million points a range:
# the worst error in ulps, the share correctly rounded, and the time of a call (docs/performance.md).
maths: fuzz/maths
	fuzz/maths
fuzz/maths: fuzz/maths.cpp matrix.hpp Makefile
	$(CXX) $(FIXED) $(CXXFLAGS) -o $@ fuzz/maths.cpp

# make web: sorter.html, one page that trains sorter in the browser: workbench/web.html around the WebAssembly
# build of workbench/web.hpp (the same sources), inlined, so that the page opens from a file, offline. Needs
# emscripten (Debian: apt-get install emscripten). NODE_PATH: where Debian keeps the JavaScript parser em++ uses.
EMXX      ?= em++
WEB_FLAGS := -O3 -msimd128 -mbulk-memory -fwasm-exceptions -s SINGLE_FILE=1 -s MODULARIZE=1 \
             -s EXPORT_NAME=createSorter -s ENVIRONMENT=worker -s ALLOW_MEMORY_GROWTH=1 \
             -s EXPORTED_FUNCTIONS=_web_call -s EXPORTED_RUNTIME_METHODS=cwrap
web: sorter.html
sorter.html: workbench/web.html $(HEADERS) $(WORKBENCH) Makefile
	@command -v $(EMXX) >/dev/null || \
	  { echo "make web needs emscripten's em++ (Debian: sudo apt-get install emscripten)"; exit 1; }
	printf '#include "workbench/web.hpp"\n' | NODE_PATH="$${NODE_PATH:+$$NODE_PATH:}/usr/share/nodejs" \
	  $(EMXX) $(filter-out -pthread,$(FIXED)) $(WEB_FLAGS) -I. -x c++ -o sorter-web.js -
	@! grep -qi '</script' sorter-web.js || { echo "make web: the build contains </script"; exit 1; }
	awk '/^@SORTER_JS@$$/ { while ((getline line < "sorter-web.js") > 0) print line; next } { print }' \
	  workbench/web.html > $@.tmp && mv $@.tmp $@ && rm -f sorter-web.js
	@echo "wrote $@ ($$(wc -c < $@) bytes): open it in a browser"

# sorter.html in headless Chromium (docs/check-web; needs node and chromium): the default run, row for row as
# ./sorter's, a run that diverges, a checkpoint opened, the pace, the layouts of a classroom; screenshots to look
# at, in DIR (make check-web DIR=folder; default /tmp/sorter-web-check).
check-web: sorter sorter.html
	@command -v node >/dev/null || { echo "make check-web needs node (Debian: sudo apt-get install nodejs)"; exit 1; }
	@docs/check-web $(DIR)

# fuzz/signals.sh: SIGNAL_RUNS gives the runs of SIGINT, SIGTERM, SIGHUP and SIGKILL (about 5 s each), then of each of
# SIGINT, SIGTERM and SIGHUP at a loaded model that trains no further (about 2 s each).
SIGNAL_RUNS ?= 40 10 10 10 10
signals: sorter
	fuzz/signals.sh $(SIGNAL_RUNS)

clean:
	rm -f sorter tests tests-lab *.o tests-sanitize tests-tsan gradcheck-tests fuzz/fuzz fuzz/maths \
	  exercise-check \
	  exercise-check.flags workbench/exercise_std.hpp.gch exercise-mistakes \
	  sorter.html sorter-web.js
