// workbench/exercise_std.hpp -- the C++ library's headers that "Write it yourself"'s check includes (the tutorial's and
// its own), precompiled once by the check's first build (the Makefile: workbench/exercise_std.hpp.gch), so that the
// rebuild after a student's edit parses only the tutorial and the check. A header missing here is parsed as usual.
#ifndef SORTER_EXERCISE_STD_HPP  // (not #pragma once: GCC warns of it in the header it precompiles)
#define SORTER_EXERCISE_STD_HPP

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>
#endif
