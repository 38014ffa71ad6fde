#pragma once
/// Everything a tapegrad user needs, in one include.
#include "framework/autograd/function.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/tape.h"
#include "framework/gradcheck/gradcheck.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduction.h"
#include "framework/tensor.h"
