#pragma once
/// tapegrad's property-testing kit for users' layers (Catch2 + RapidCheck; link tapegrad::testing):
/// check_module_gradients, check_buffer_invariance, allclose/identical and the TAPEGRAD_RC_* macros.
#include "framework/gradcheck/generators.h"
#include "framework/gradcheck/gradcheck.h"
#include "framework/testing/buffer_invariance.h"
#include "framework/testing/buffer_rules.h"
#include "framework/testing/compare.h"
#include "framework/testing/module_gradients.h"
