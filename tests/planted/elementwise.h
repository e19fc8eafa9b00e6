/* The bugs of maximum.c, gelu.c and cast.c. maximum (NumPy broadcasting, NaN propagated), gelu (erf form, tanh form where approximate, in f32) and cast (float ->
 * float rounds to nearest even; float -> int truncates toward zero and saturates, NaN -> 0). Planted bugs:
 *   maximum-fmaxf        fmaxf(a, b): returns the other operand when one is NaN
 *   gelu-erf             the erf form 0.5 x (1 + erf(x / sqrt 2)) even where `approximate` asks for the tanh form
 *   gelu-f16-truncate    stores f16 by dropping mantissa bits instead of rounding to nearest even
 *   cast-no-saturation   a plain C cast: out-of-range values wrap or become INT_MIN
 *   cast-nan-not-zero    saturates, but NaN falls through to the C cast
 *   cast-f16-truncate    f32 -> f16 by dropping mantissa bits */
