// Catch2's main, in its own file so that tapegrad's suite can compile power_norm_test.cpp with its own main.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
