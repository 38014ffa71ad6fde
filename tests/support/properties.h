#pragma once
// tapegrad's own tests use the installed kit: testing.h (tapegrad::testing) holds allclose, identical, the
// TAPEGRAD_RC_* macros and the module checks.
#include <catch2/catch.hpp>
#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include <tapegrad/testing.h>
