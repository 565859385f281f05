// A zoo of small models of the common benchmark families, built from ember's layers
// (include/ember/nn.h, include/ember/layers.h): an MLP, a ResNet, MobileNetV2, a ViT, a
// BERT-style encoder with a padding mask, a LLaMA-style decoder, a mixture-of-experts LM, a GRU
// LM and a U-Net (with nn::GPT, ten families). Each is made from a config struct whose
// defaults are a tiny model (its tiny() returns them), and names its parameters as the usual
// PyTorch implementation does where there is one (torchvision, transformers).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ember/layers.h"
#include "ember/nn.h"
#include "ember/tensor.h"

namespace ember::models {

// ---- MLP ----

struct MLPConfig {
  int64_t in_features = 16;
  std::vector<int64_t> hidden = {32, 32};
  int64_t num_classes = 4;
  double dropout = 0.0;
  static MLPConfig tiny() { return {}; }  // the defaults
};

// Linear layers with ReLU (and dropout) between them: layers.0, layers.1, ...
class MLP : public nn::Module {
 public:
  // Linear(in, hidden[0]), ..., Linear(hidden[-1], num_classes).
  explicit MLP(const MLPConfig& c = {});
  Tensor forward(const Tensor& x) const;  // [N, in] -> logits [N, classes]
  // Mean cross entropy of the logits against int64 labels [N].
  Tensor loss(const Tensor& x, const Tensor& labels) const;
  MLPConfig config;
  std::vector<std::shared_ptr<nn::Linear>> layers;
  std::shared_ptr<nn::Dropout> drop;
};

// ---- ResNet ----

struct ResNetConfig {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  int64_t width = 8;                           // channels of layer1; doubled by each later stage
  std::vector<int64_t> blocks = {1, 1, 1, 1};  // BasicBlocks per stage; {2, 2, 2, 2}: ResNet-18
  // The stem: false, CIFAR's (a 3x3 stride-1 conv, no pooling); true, ImageNet's as in
  // torchvision (a 7x7 stride-2 conv, then a 3x3 stride-2 max pool with padding 1).
  bool imagenet_stem = false;
  static ResNetConfig tiny() { return {}; }    // the defaults
  // ResNet-18 for CIFAR-10: width 64, two blocks a stage.
  static ResNetConfig resnet18();
  // torchvision's resnet18(): the ImageNet stem and 1000 classes (the same names and shapes,
  // so its weights load).
  static ResNetConfig resnet18_imagenet();
};

// Two 3x3 conv + BatchNorm layers and the identity (or a strided 1x1 conv + BatchNorm,
// "downsample") added before the last ReLU.
class BasicBlock : public nn::Module {
 public:
  // A block from in to out channels whose first conv has the given stride.
  BasicBlock(int64_t in, int64_t out, int64_t stride);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ModuleList> downsample;  // "0": conv, "1": bn; null for the identity
  std::shared_ptr<nn::Conv2d> down_conv;
  std::shared_ptr<nn::BatchNorm2d> down_bn;
};

// torchvision's ResNet, with the CIFAR stem (a 3x3 stride-1 conv, no max pool) unless the
// config asks for the ImageNet one: conv1, bn1, (maxpool), layer1..layer4 (strides 1, 2, 2, 2),
// global average pool, fc.
class ResNet : public nn::Module {
 public:
  // The network for c (4 stages, each at least one block).
  explicit ResNet(const ResNetConfig& c = {});
  Tensor forward(const Tensor& x) const;  // [N, C, H, W] -> logits [N, classes]
  // Mean cross entropy of the logits against int64 labels [N].
  Tensor loss(const Tensor& x, const Tensor& labels) const;
  ResNetConfig config;
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::MaxPool2d> maxpool;  // the ImageNet stem's; null for CIFAR's
  std::vector<std::vector<std::shared_ptr<BasicBlock>>> stages;  // layer1..layer4
  std::shared_ptr<nn::Linear> fc;
};

// ---- MobileNetV2 ----

struct MobileNetV2Config {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  int64_t stem_channels = 8;
  int64_t last_channels = 32;
  // Inverted-residual stages {expand ratio t, channels c, repeats n, first stride s}, as in the
  // paper's table 2 (whose full list starts {1, 16, 1, 1}, {6, 24, 2, 2}, ...).
  std::vector<std::vector<int64_t>> stages = {{1, 8, 1, 1}, {6, 12, 2, 2}, {6, 16, 2, 2}};
  int64_t stem_stride = 1;  // 2 for ImageNet-sized inputs
  double dropout = 0.0;
  static MobileNetV2Config tiny() { return {}; }  // the defaults
};

// Conv2d (no bias), BatchNorm2d, then ReLU6 when `act`: children "0" and "1", as torchvision's
// Conv2dNormActivation.
class ConvBNAct : public nn::Module {
 public:
  // A k x k conv from in to out channels (padding (k - 1) / 2) with this stride and groups.
  ConvBNAct(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups, bool act);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  bool act;
};

// MobileNetV2's inverted residual: 1x1 expansion (when t != 1), 3x3 depthwise conv with the
// stride, 1x1 linear projection; the input is added back when the stride is 1 and the
// channels agree. Children under "conv" as torchvision's.
class InvertedResidual : public nn::Module {
 public:
  // A block from in to out channels with expansion ratio t.
  InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand_ratio);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<ConvBNAct> expand, depthwise;  // expand is null for t == 1
  std::shared_ptr<nn::Conv2d> project;
  std::shared_ptr<nn::BatchNorm2d> project_bn;
  bool use_residual;
};

// features.0 (stem), features.1.. (inverted residuals), the last 1x1 ConvBNAct, global average
// pool, classifier.1 (dropout before it).
class MobileNetV2 : public nn::Module {
 public:
  // The network for c.
  explicit MobileNetV2(const MobileNetV2Config& c = {});
  Tensor forward(const Tensor& x) const;  // [N, C, H, W] -> logits [N, classes]
  // Mean cross entropy of the logits against int64 labels [N].
  Tensor loss(const Tensor& x, const Tensor& labels) const;
  MobileNetV2Config config;
  std::shared_ptr<ConvBNAct> stem, head;
  std::vector<std::shared_ptr<InvertedResidual>> blocks;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> classifier;
};

// ---- transformer encoder pieces (ViT, BERT) ----

// Multi-head self-attention over [B, T, C], not causal; an optional key padding mask.
class SelfAttention : public nn::Module {
 public:
  // Separate query, key, value projections and an output projection, all with bias.
  SelfAttention(int64_t dim, int64_t n_heads, double dropout = 0.0);
  // x [B, T, C]; key_padding_mask [B, T] bool, true where a key is padding (it then gets no
  // attention weight), or undefined for none.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = Tensor()) const;
  std::shared_ptr<nn::Linear> query, key, value, out;
  int64_t n_heads;
  double dropout;
};

// A transformer encoder layer: attention and a GELU feed-forward, each added back to its
// input; pre-norm (ViT: x + f(norm(x))) or post-norm (BERT: norm(x + f(x))).
class EncoderBlock : public nn::Module {
 public:
  // dim, heads, feed-forward width, where the norms sit, LayerNorm eps.
  EncoderBlock(int64_t dim, int64_t n_heads, int64_t mlp_dim, bool pre_norm, double eps = 1e-5,
               double dropout = 0.0);
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = Tensor()) const;
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
  std::shared_ptr<SelfAttention> attn;
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  bool pre_norm;
};

// ---- ViT ----

struct ViTConfig {
  int64_t image_size = 16;
  int64_t patch_size = 4;
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  int64_t dim = 32;
  int64_t depth = 2;
  int64_t n_heads = 4;
  int64_t mlp_dim = 64;
  double dropout = 0.0;
  static ViTConfig tiny() { return {}; }  // the defaults
};

// Vision transformer: patch embedding (a conv with stride = kernel = patch), a class token,
// learned position embeddings, pre-norm encoder blocks, a final norm and a head on the class
// token.
class ViT : public nn::Module {
 public:
  // The model for c (image_size divisible by patch_size).
  explicit ViT(const ViTConfig& c = {});
  Tensor forward(const Tensor& x) const;  // [N, C, H, W] -> logits [N, classes]
  // Mean cross entropy of the logits against int64 labels [N].
  Tensor loss(const Tensor& x, const Tensor& labels) const;
  ViTConfig config;
  std::shared_ptr<nn::Conv2d> patch_embed;
  Tensor cls_token, pos_embed;  // [1, 1, dim], [1, patches + 1, dim]
  std::vector<std::shared_ptr<EncoderBlock>> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

// ---- BERT ----

struct BertConfig {
  int64_t vocab_size = 50;
  int64_t max_position = 16;
  int64_t dim = 32;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t mlp_dim = 64;
  double eps = 1e-12;  // BERT's LayerNorm eps
  double dropout = 0.0;
  static BertConfig tiny() { return {}; }  // the defaults
};

// A BERT-style encoder with a masked-LM head: word + position embeddings, LayerNorm, post-norm
// encoder layers whose attention ignores padded keys, and a head (transform, GELU, LayerNorm,
// a decoder tied to the word embeddings). Padding is given as lengths: position t of sequence b
// is padding when t >= lengths[b].
class Bert : public nn::Module {
 public:
  // The model for c.
  explicit Bert(const BertConfig& c = {});
  // The padding mask of lengths [B] (int64) for T positions: [B, T] bool, true at padding.
  static Tensor padding_mask(const Tensor& lengths, int64_t T);
  // ids [B, T] int64, lengths [B] int64 (each in 1..T) -> hidden states [B, T, dim].
  Tensor encode(const Tensor& ids, const Tensor& lengths) const;
  // The masked-LM logits [B, T, vocab].
  Tensor forward(const Tensor& ids, const Tensor& lengths) const;
  // Mean cross entropy of the logits against targets [B, T]; targets -100 (and padding, which
  // callers mark -100) do not count.
  Tensor loss(const Tensor& ids, const Tensor& lengths, const Tensor& targets) const;
  BertConfig config;
  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings;
  std::shared_ptr<nn::LayerNorm> emb_norm;
  std::shared_ptr<nn::Dropout> drop;
  std::vector<std::shared_ptr<EncoderBlock>> layers;
  std::shared_ptr<nn::Linear> transform, decoder;
  std::shared_ptr<nn::LayerNorm> head_norm;
};

// ---- LLaMA ----

struct LlamaConfig {
  int64_t vocab_size = 64;
  int64_t max_seq_len = 16;
  int64_t dim = 32;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;  // grouped-query attention: n_heads / n_kv_heads queries share a key
  int64_t hidden_dim = 64;  // the SwiGLU feed-forward's width
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  static LlamaConfig tiny() { return {}; }  // the defaults
};

// Grouped-query causal attention with rotary position embeddings (q_proj, k_proj, v_proj,
// o_proj, no biases).
class LlamaAttention : public nn::Module {
 public:
  // The attention of c.
  explicit LlamaAttention(const LlamaConfig& c);
  // x [B, T, dim]; cos and sin [T, head_dim / 2] (rotary_cos_sin).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const;
  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;
  int64_t n_heads, n_kv_heads, head_dim;
};

// LLaMA's feed-forward: down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLP : public nn::Module {
 public:
  // dim -> hidden_dim -> dim, no biases.
  explicit LlamaMLP(const LlamaConfig& c);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
};

// x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(x)).
class LlamaDecoderLayer : public nn::Module {
 public:
  // A layer of c.
  explicit LlamaDecoderLayer(const LlamaConfig& c);
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const;
  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
};

// A LLaMA-style decoder with transformers' names (model.embed_tokens, model.layers.<i>,
// model.norm, lm_head; the head not tied).
class Llama : public nn::Module {
 public:
  // The model for c (n_heads divisible by n_kv_heads, dim by n_heads, an even head_dim);
  // the rotary tables of max_seq_len positions are built here.
  explicit Llama(const LlamaConfig& c = {});
  Tensor forward(const Tensor& idx) const;  // [B, T] int64 -> logits [B, T, vocab]
  // Mean cross entropy of the logits against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  LlamaConfig config;
  std::shared_ptr<nn::ModuleList> model;  // embed_tokens, layers.<i>, norm
  std::shared_ptr<nn::Embedding> embed_tokens;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::Linear> lm_head;
  Tensor rope_cos, rope_sin;  // [max_seq_len, head_dim / 2], buffers kept out of the state dict
};

// ---- mixture of experts ----

struct MoEConfig {
  int64_t vocab_size = 64;
  int64_t block_size = 16;
  int64_t dim = 32;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_experts = 4;
  int64_t top_k = 2;
  int64_t expert_hidden = 32;
  static MoEConfig tiny() { return {}; }  // the defaults
};

// A mixture-of-experts feed-forward: a router (gate) scores the experts of each token, the top_k
// scores are softmaxed into weights (Mixtral's routing) and the output is the weighted sum of
// those experts' SwiGLU feed-forwards. Dense-masked: every expert runs on every token and the
// experts outside the top_k get weight 0, so the layer has fixed shapes and compiles into one
// graph (a sparse dispatch would gather tokens by data-dependent counts: a graph break).
class MoELayer : public nn::Module {
 public:
  // The layer of c: gate Linear(dim, n_experts), experts.<e> (LlamaMLP-shaped: w1, w3, w2).
  explicit MoELayer(const MoEConfig& c);
  Tensor forward(const Tensor& x) const;  // [..., dim] -> [..., dim]
  // The routing weights [..., n_experts] of x: top_k non-zeros per token summing to 1.
  Tensor routing_weights(const Tensor& x) const;
  std::shared_ptr<nn::Linear> gate;
  struct Expert {
    std::shared_ptr<nn::ModuleList> m;
    std::shared_ptr<nn::Linear> w1, w2, w3;
  };
  std::vector<Expert> experts;
  int64_t top_k;
};

// x + attn(ln_1(x)), then + moe(ln_2(x)); the attention is nn::CausalSelfAttention.
class MoEBlock : public nn::Module {
 public:
  // A block of c.
  explicit MoEBlock(const MoEConfig& c);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<nn::CausalSelfAttention> attn;
  std::shared_ptr<MoELayer> moe;
};

// A GPT-shaped language model whose feed-forwards are MoE layers.
class MoETransformer : public nn::Module {
 public:
  // The model for c (top_k in 1..n_experts).
  explicit MoETransformer(const MoEConfig& c = {});
  Tensor forward(const Tensor& idx) const;  // [B, T] int64 -> logits [B, T, vocab]
  // Mean cross entropy of the logits against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  MoEConfig config;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::vector<std::shared_ptr<MoEBlock>> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;
};

// ---- GRU language model ----

struct GRULMConfig {
  int64_t vocab_size = 32;
  int64_t embed_dim = 16;
  int64_t hidden_size = 32;
  int64_t n_layers = 2;
  static GRULMConfig tiny() { return {}; }  // the defaults
};

// Embedding, stacked GRU cells run by a C++ loop over the time steps (under compile the loop
// unrolls into one graph for each sequence length), a Linear head.
class GRULM : public nn::Module {
 public:
  // The model for c.
  explicit GRULM(const GRULMConfig& c = {});
  // idx [B, T] int64 -> logits [B, T, vocab], from zero initial states.
  Tensor forward(const Tensor& idx) const;
  // Mean cross entropy of the logits against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  GRULMConfig config;
  std::shared_ptr<nn::Embedding> embedding;
  std::vector<std::shared_ptr<nn::GRUCell>> cells;  // cells.<l>
  std::shared_ptr<nn::Linear> head;
};

// ---- U-Net ----

struct UNetConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 2;
  int64_t base_channels = 8;  // doubled at each level down
  int64_t depth = 2;          // levels below the top one (H and W divisible by 2^depth)
  int64_t groups = 4;         // GroupNorm groups
  static UNetConfig tiny() { return {}; }  // the defaults
};

// Two (3x3 conv, GroupNorm, ReLU) layers.
class DoubleConv : public nn::Module {
 public:
  // in -> out channels, groups of the GroupNorms.
  DoubleConv(int64_t in, int64_t out, int64_t groups);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::GroupNorm> norm1, norm2;
};

// Encoder: DoubleConv, then depth times (2x2 max pool, DoubleConv doubling the channels);
// decoder: depth times (nearest 2x interpolate, concatenation with the encoder's features of
// that size, DoubleConv halving the channels); a 1x1 conv to out_channels.
class UNet : public nn::Module {
 public:
  // The network for c.
  explicit UNet(const UNetConfig& c = {});
  Tensor forward(const Tensor& x) const;  // [N, in, H, W] -> [N, out, H, W]
  // Mean squared error against target [N, out, H, W].
  Tensor loss(const Tensor& x, const Tensor& target) const;
  UNetConfig config;
  std::vector<std::shared_ptr<DoubleConv>> down;  // down.0 .. down.<depth>
  std::vector<std::shared_ptr<DoubleConv>> up;    // up.0 .. up.<depth - 1>
  std::shared_ptr<nn::Conv2d> out;
};

}  // namespace ember::models
