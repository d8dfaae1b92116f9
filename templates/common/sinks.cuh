// ---- common/sinks.cuh: attention sinks (gpt-oss) at the final normalisation of a row ----
// Included only by the sink variants (AttentionSpec.sinks).  A sink is one extra logit per query
// head with no value: p_j = exp(s_j) / (exp(sink) + sum_k exp(s_k)).  After finalize_rows a row
// holds O normalised by its own sum and its natural-log LSE, so the sink is the exact rescale of
// launch/sinks.py in registers: lse' = logaddexp(lse, sink), O *= exp(lse - lse').  A row with no
// key (lse = -inf, O = 0) gets lse' = sink and keeps O = 0; sink = -inf is no sink.  Only rows
// written directly: a split-KV partial must not see the sink (the combine kernel adds it once).
constexpr float SINK_LOG2E = 1.4426950408889634f;

__device__ __forceinline__ float sink_of(const AttnParams& p, int head) {
  return __ldg(reinterpret_cast<const float*>(p.sinks) + head);
}

// lse <- logaddexp(lse, sink); returns O's factor exp(lse - lse') in [0, 1]
__device__ __forceinline__ float sink_rescale(float& lse, float sink) {
  const float mx = fmaxf(lse, sink);
  if (mx == -KG_INF) return 0.f;  // no key and no sink: O = 0, lse = -inf
  const float a = exp2f((lse - mx) * SINK_LOG2E), b = exp2f((sink - mx) * SINK_LOG2E);
  const float z = a + b;           // in [1, 2]
  lse = mx + log2f(z) * KG_LN2;
  return a / z;
}
