/* Every float operation in the runtime rounds as written: no multiply is fused into the add
 * after it. The kernels' fp32 requantisation and the fp32 Add are onnxruntime's arithmetic
 * step for step (the tests compare bytes), and an FMA rounds once where those steps round
 * twice. ISO C (-std=c99, what every edgesmith build passes) does not contract; GCC's
 * default GNU mode does (-ffp-contract=fast), and clang contracts within an expression.
 * Built that way, the fp32 Add drifted from onnxruntime on 28 of 131 million byte pairs
 * (2,000 scale sets, GCC 12, -O3 -march=native). So each runtime source includes this
 * first, before any function a header defines, and contraction is off in every one of its
 * functions whatever the caller's flags. Explicit FMA intrinsics (the fp32 GEMMs) are not
 * contraction and stay FMAs. */
#ifndef ES_FP_EXACT_H
#define ES_FP_EXACT_H
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#endif
