// Placeholder so kvshare_attention has a source in the model-io branch, where
// no attention kernels exist yet. Delete once src/attention/*.cc lands.
namespace kvshare::detail {
int AttentionPlaceholder() { return 0; }
}  // namespace kvshare::detail
