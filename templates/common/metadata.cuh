// ---- common/metadata.cuh: the scheduler-metadata ABI (mirrors kernelgen/metadata.py) ----
// Layout: {{ layout }}.  Header of {{ md_header_ints }} ints, then {{ md_nvec }} fields per entry.
#define MD_SEMAPHORE {{ md_semaphore }}
#define MD_TOTAL_TILES {{ md_total_tiles }}
#define MD_BATCH {{ md_batch }}
#define MD_EXIT_COUNT {{ md_exit_count }}
{% for k, f in md_fields %}
#define MD_F_{{ f | upper }} {{ k }}
{% endfor %}
#define MD_NEUTRAL_SPLITS_NHEADS {{ md_neutral_splits_nheads }}

__device__ __forceinline__ int md_cap4(int capacity) { return (capacity + 3) & ~3; }

// Element offset of field `f` of entry `vb`.
__device__ __forceinline__ int md_offset(int cap4, int f, int vb) {
{% if layout == "soa" %}
  return {{ md_header_ints }} + f * cap4 + vb;
{% else %}
  return {{ md_header_ints }} + {{ md_nvec }} * vb + f;
{% endif %}
}

struct MdEntry {
  int tile_start, batch_idx, m_blocks, splits_nheads;
};

__device__ __forceinline__ MdEntry md_load_entry(const int* md, int cap4, int vb) {
  MdEntry e;
{% if layout == "aos" %}
  int4 v = *reinterpret_cast<const int4*>(md + {{ md_header_ints }} + {{ md_nvec }} * vb);
  e.tile_start = v.x; e.batch_idx = v.y; e.m_blocks = v.z; e.splits_nheads = v.w;
{% else %}
  e.tile_start = md[md_offset(cap4, MD_F_TILE_START, vb)];
  e.batch_idx = md[md_offset(cap4, MD_F_BATCH_IDX, vb)];
  e.m_blocks = md[md_offset(cap4, MD_F_M_BLOCKS, vb)];
  e.splits_nheads = md[md_offset(cap4, MD_F_SPLITS_NHEADS, vb)];
{% endif %}
  return e;
}

__device__ __forceinline__ void md_store_entry(int* md, int cap4, int vb, MdEntry e) {
{% if layout == "aos" %}
  *reinterpret_cast<int4*>(md + {{ md_header_ints }} + {{ md_nvec }} * vb) = make_int4(e.tile_start, e.batch_idx, e.m_blocks, e.splits_nheads);
{% else %}
  md[md_offset(cap4, MD_F_TILE_START, vb)] = e.tile_start;
  md[md_offset(cap4, MD_F_BATCH_IDX, vb)] = e.batch_idx;
  md[md_offset(cap4, MD_F_M_BLOCKS, vb)] = e.m_blocks;
  md[md_offset(cap4, MD_F_SPLITS_NHEADS, vb)] = e.splits_nheads;
{% endif %}
}
