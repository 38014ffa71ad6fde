#pragma once
// Internal: run-time dispatch of tapegrad's own hot loops.
//
// Note: the default build targets x86-64-v2 (SSE4.2), so that it runs on any such CPU. A function marked
// TAPEGRAD_DISPATCH is compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline,
// and the dynamic loader binds the best one for the CPU it runs on, once (GCC's target_clones, an ifunc).
// Loops inlined into such a function are vectorised for each target. A native build (-march=native), a
// sanitizer build and compilers without target_clones get one plain copy.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(TAPEGRAD_NO_DISPATCH)
#define TAPEGRAD_DISPATCH __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TAPEGRAD_DISPATCH
#endif
