#pragma once
/// tapegrad's property-testing kit for users' layers (Catch2 + RapidCheck; link tapegrad::testing):
/// check_module_gradients, check_buffer_invariance (buffer and value rules), allclose/identical and the
/// TAPEGRAD_RC_* macros.
#include <tapegrad/framework/gradcheck/generators.h>
#include <tapegrad/framework/gradcheck/gradcheck.h>
#include <tapegrad/framework/testing/buffer_invariance.h>
#include <tapegrad/framework/testing/buffer_rules.h>
#include <tapegrad/framework/testing/compare.h>
#include <tapegrad/framework/testing/module_gradients.h>
#include <tapegrad/framework/testing/report.h>
#include <tapegrad/framework/testing/value_rules.h>
