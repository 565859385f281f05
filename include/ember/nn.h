// Neural-network modules: parameters, buffers and submodules with PyTorch-style dotted names,
// train/eval modes, state dicts; the layers of a GPT.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::nn {

// Ordered name -> tensor mapping (insertion order is kept, like Python dicts).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict found (empty lists = an exact match).
struct LoadReport {
  std::vector<std::string> missing;     // expected by the module, absent in the dict
  std::vector<std::string> unexpected;  // in the dict, unknown to the module
  std::vector<std::string> mismatched;  // "name: expected [..] float32, got [..] float64"
  // Whether nothing was missing, unexpected or mismatched; the three lists as text.
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string str() const;
};

class Module {
 public:
  // `type_name` is shown in errors and printing ("Linear").
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The name given at construction.
  const std::string& type_name() const { return type_name_; }

  // Parameters, deduplicated (a tied weight appears once), in registration order.
  std::vector<Tensor> parameters() const;
  // Every (dotted name, parameter), deduplicated by tensor identity (first name wins).
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // Every (dotted name, buffer); every (dotted name, module), this one first as ""; the number of
  // parameter elements.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;

  // Training mode for this module and its children (dropout on); eval() is train(false).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const;  // read under capture, it becomes a guard
  // Drops the .grad of every parameter.
  void zero_grad();

  // Parameters and buffers by dotted name; tied tensors appear under every name.
  StateDict state_dict() const;
  // Copies values into the module's own tensors. strict: throws on any missing, unexpected
  // or mismatched key, without changing anything; non-strict: loads what matches and
  // reports the rest. Keys prefixed "_orig_mod." (written by compiled wrappers elsewhere)
  // are accepted.
  LoadReport load_state_dict(const StateDict& dict, bool strict = true);
  // Moves every parameter and buffer of this module and its children to `device` (a no-op for
  // those already there). Tied tensors stay tied; grads are not moved (they are dropped). Make
  // optimizers after moving: they hold the parameters they were given.
  void to(Device device);
  // Converts every floating-point parameter and buffer to the floating dtype `dtype` (integer
  // buffers, like BatchNorm's batch count, stay). Tied tensors stay tied; grads are dropped.
  // Make optimizers after converting.
  void to(DType dtype);
  // Replaces a registered parameter by another tensor (weight tying): the slot holds `t`.
  void tie_parameter(const std::string& name, const Tensor& t);
  // Every (name, slot) of this module alone (not its children), parameters then buffers; for
  // capture, which reads a parameter through its slot on each replay.
  void for_each_slot(const std::function<void(const std::string&, const Tensor&, bool buffer)>& f) const;
  // Expires when the module is destroyed (capture holds it weakly next to a slot's address).
  std::weak_ptr<const void> alive_token() const { return alive_; }

 protected:
  // Registers `slot`, a Tensor member of this module (it must live as long as the module), as
  // parameter or buffer `name`, and stores `value` in it. The module reads its parameters
  // through the slot, so assigning another tensor to the member replaces the parameter
  // (state_dict, parameters() and compiled replays see the new one).
  Tensor& register_parameter(const std::string& name, Tensor& slot, Tensor value);
  // A buffer with persistent = false (a table computed from the config, like rotary cos/sin)
  // moves with to() and is read through its slot by capture, but stays out of state_dict().
  Tensor& register_buffer(const std::string& name, Tensor& slot, Tensor value,
                          bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  // Replaces every parameter and buffer t (of this module and its children) for which
  // wants(t) by to(t) computed without grad, once per tensor (tied ones stay tied);
  // parameters keep requiring grad.
  void convert(const std::function<bool(const Tensor&)>& wants,
               const std::function<Tensor(const Tensor&)>& to);
  void collect(const std::string& prefix, StateDict& params, StateDict& buffers,
               bool persistent_only = false) const;
  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::set<const Tensor*> transient_;  // buffers registered with persistent = false
  std::shared_ptr<const void> alive_ = std::make_shared<char>();
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// A plain container of named submodules (for nesting names like "transformer.h.0").
class ModuleList : public Module {
 public:
  // An empty list; add() registers a child under `name` and returns it.
  ModuleList() : Module("ModuleList") {}
  template <class M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

// ---- layers ----

class Linear : public Module {
 public:
  // y = x W^T + b over the last dim of x; weight normal(0, 0.02), bias 0 (GPT-2's init).
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // weight [out, in]
};

class Embedding : public Module {
 public:
  // Rows of `weight` picked by int64 indices; throws Error for an index outside [0, num).
  Embedding(int64_t num_embeddings, int64_t dim);
  Tensor forward(const Tensor& indices) const;
  Tensor weight;  // [num, dim]
};

class LayerNorm : public Module {
 public:
  // Normalizes the last dim (size `dim`) to mean 0, variance 1, then scales and shifts.
  explicit LayerNorm(int64_t dim, bool bias = true, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  double eps;
};

class Dropout : public Module {
 public:
  // Training mode: zeroes elements with probability p, scales the rest by 1/(1-p); eval: identity.
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) const;
  double p;
};

class GELU : public Module {
 public:
  // GELU, exact (erf) or the tanh approximation.
  explicit GELU(bool tanh_approx = false);
  Tensor forward(const Tensor& x) const;
  bool tanh_approx;
};

struct GPTConfig {
  int64_t block_size = 256;
  int64_t vocab_size = 65;
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  double dropout = 0.0;
  bool bias = true;
  // The config as JSON (stored in checkpoints), and back; from_json throws on missing keys.
  std::string to_json() const;
  static GPTConfig from_json(const std::string& json);
};

class CausalSelfAttention : public Module {
 public:
  // Multi-head causal self-attention over [B, T, C] (n_embd divisible by n_head, else Error).
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x) const;  // [B, T, C] -> [B, T, C]
  // The same in eval mode for x at positions pos .. pos + T - 1 of a sequence whose earlier keys
  // and values are in k_cache and v_cache ([B, n_head, block, head]; allocated here, in the
  // dtype and on the device of the keys, when undefined), to which x's are written.
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                        int64_t block) const;
  // One position x [B, 1, C] at `pos` (an int64 tensor of one element) in eval mode, over
  // caches allocated to the block ([B, n_head, block, head]): its key and value written into
  // them at pos in place, the keys past pos masked out. No shape depends on pos.
  Tensor decode_step(const Tensor& x, const Tensor& pos, Tensor k_cache, Tensor v_cache) const;
  // The first T positions x [B, T, C] in eval mode, causal, over caches allocated to the block:
  // their keys and values written into positions 0 .. T - 1 in place (the rest kept).
  Tensor prefill(const Tensor& x, Tensor k_cache, Tensor v_cache) const;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
  int64_t n_head, n_embd;
  double dropout;
};

class MLP : public Module {
 public:
  // The block's feed-forward: Linear(C, 4C), GELU, Linear(4C, C), dropout.
  explicit MLP(const GPTConfig& c);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Dropout> dropout;
};

class Block : public Module {
 public:
  // A pre-norm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x) const;
  // forward in eval mode with the attention's keys and values cached (CausalSelfAttention).
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                        int64_t block) const;
  Tensor decode_step(const Tensor& x, const Tensor& pos, Tensor k_cache, Tensor v_cache) const;
  Tensor prefill(const Tensor& x, Tensor k_cache, Tensor v_cache) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

// The keys and values of every layer of a GPT for decoding token by token
// (GPT::forward_cached): per layer [B, n_head, block_size, head_size], allocated by the first
// call; positions 0 .. length - 1 are filled.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;
};

// nanoGPT's GPT: token + position embeddings, pre-norm blocks, final norm, a head tied to the
// token embedding. Parameter names match nanoGPT's (transformer.wte.weight, ...).
class GPT : public Module {
 public:
  // The model for c, initialized as GPT-2: normal(0, 0.02), residual projections / sqrt(2 n_layer).
  explicit GPT(const GPTConfig& c);
  // idx [B, T] int64 -> logits [B, T, vocab]
  Tensor forward(const Tensor& idx) const;
  // Mean cross entropy of the logits against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  // Logits [B, T, vocab] of idx [B, T] at positions cache.length .. cache.length + T - 1 (eval
  // mode), the earlier positions' keys and values read from the cache, idx's appended to it.
  // The positions must fit in block_size; a batch other than the cache's is an error.
  Tensor forward_cached(const Tensor& idx, KVCache& cache) const;
  // A cache for `batch` sequences with every layer's keys and values allocated to block_size
  // (zeros, in the dtype and on the device of the token embedding), as decode_step reads it.
  KVCache preallocated_cache(int64_t batch) const;
  // Logits [B, 1, vocab] of the tokens idx [B, 1] at position pos (an int64 tensor of one
  // element, below block_size) in eval mode, the earlier positions' keys and values read from
  // k and v (preallocated_cache's), this position's written into them in place. Its shapes
  // do not depend on pos, so one compiled decode_step serves every position (a compiled
  // function taking idx, pos, k and v traces once).
  Tensor decode_step(const Tensor& idx, const Tensor& pos, const std::vector<Tensor>& k,
                     const std::vector<Tensor>& v) const;
  // The prompt idx [B, T] (T <= block_size) in eval mode: its keys and values written into
  // positions 0 .. T - 1 of k and v (preallocated_cache's) in place, and the logits
  // [B, 1, vocab] of its last position, as decode_step then continues from position T. No view
  // of a cache is read after it is written, so a compiled prefill is one graph.
  Tensor prefill(const Tensor& idx, const std::vector<Tensor>& k,
                 const std::vector<Tensor>& v) const;
  // Appends max_new_tokens sampled tokens to idx [B, T] (eval mode, no grad; 16-bit logits are
  // drawn from in float32). `logits_of`,
  // when given, computes the logits of a context in place of forward (a compiled forward:
  // the context grows to block_size, then slides). Without it, the context's keys and values
  // are cached (forward_cached): each new token costs one position's work until the context
  // reaches block_size; past it, the window slides and every step runs the whole window.
  // `decode`, when given, computes each new token's logits as decode_step does (a compiled
  // decode_step): the cache is preallocated, the prompt runs through `prefill` (a compiled
  // prefill) when given, else forward_cached, then each token through `decode` until the
  // context reaches block_size; past it the window slides as above (through `logits_of` when
  // given). `decode` gets the same position tensor at every step, refilled (a recorded CUDA
  // graph then reads it where it lies): copy it to keep a step's position.
  using DecodeFn = std::function<Tensor(const Tensor& idx, const Tensor& pos,
                                        const std::vector<Tensor>& k, const std::vector<Tensor>& v)>;
  using PrefillFn = std::function<Tensor(const Tensor& idx, const std::vector<Tensor>& k,
                                         const std::vector<Tensor>& v)>;
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0,
                  int64_t top_k = 0,
                  const std::function<Tensor(const Tensor&)>& logits_of = nullptr,
                  const DecodeFn& decode = nullptr, const PrefillFn& prefill = nullptr);
  // Parameter count without the position embedding (as nanoGPT reports).
  int64_t num_params_reported() const;
  GPTConfig config;
  std::shared_ptr<ModuleList> transformer;  // wte, wpe, drop, h.<i>, ln_f
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::vector<std::shared_ptr<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;

 private:
  void init_weights();
};

// Fills t in place (no grad) with normal(0, std) / zeros.
void init_normal_(Tensor& t, double std);
void init_zeros_(Tensor& t);

}  // namespace ember::nn
