// Placeholder so that kvshare_attention has a source in branches without the
// attention kernels (runtime-tok). Remove when merging with the attention layer.
namespace kvshare::attention_placeholder {
int Unused() { return 0; }
}  // namespace kvshare::attention_placeholder
