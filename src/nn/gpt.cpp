// nanoGPT's GPT: attention, MLP, blocks, the model, and sampling.
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ember/autograd.h"
#include "ember/nn.h"
#include "ember/ops.h"

namespace ember::nn {

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : Module("CausalSelfAttention"), n_head(c.n_head), n_embd(c.n_embd), dropout(c.dropout) {
  EMBER_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd (", c.n_embd,
              ") must be divisible by n_head (", c.n_head, ")");
  c_attn = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, c.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, c.bias));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(c.dropout));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head;
  std::vector<Tensor> qkv = c_attn->forward(x).split(n_embd, 2);
  // [B, T, C] -> [B, nh, T, hs]
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  Tensor y = scaled_dot_product_attention(q, k, v, /*is_causal=*/true,
                                          is_training() ? dropout : 0.0);
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  return resid_dropout->forward(c_proj->forward(y));
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache,
                                           int64_t pos, int64_t block) const {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head;
  std::vector<Tensor> qkv = c_attn->forward(x).split(n_embd, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  if (!k_cache.defined()) {
    TensorOptions o(k.dtype());
    o.device = k.device();
    k_cache = zeros({B, n_head, block, hs}, o);
    v_cache = zeros({B, n_head, block, hs}, o);
  }
  EMBER_CHECK(k_cache.size(0) == B, "GPT: a key/value cache of batch ", k_cache.size(0),
              " cannot serve a batch of ", B, "; start a new KVCache");
  k_cache.slice(2, pos, pos + T).copy_(k);
  v_cache.slice(2, pos, pos + T).copy_(v);
  const Tensor keys = k_cache.slice(2, 0, pos + T), values = v_cache.slice(2, 0, pos + T);
  Tensor y;
  if (pos == 0 || T == 1) {
    // A first chunk attends causally; one new query sees every cached key.
    y = scaled_dot_product_attention(q, keys, values, /*is_causal=*/pos == 0, 0.0);
  } else {
    // Queries at pos .. pos + T - 1 see the keys up to their own position.
    TensorOptions o(q.dtype());
    o.device = q.device();
    Tensor att = matmul(q, keys.transpose(-2, -1)) * (1.0 / std::sqrt(double(hs)));
    att = (att + full({T, pos + T}, -INFINITY, o).triu(pos + 1)).softmax(-1);
    y = matmul(att, values);
  }
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  return c_proj->forward(y);
}

Tensor CausalSelfAttention::decode_step(const Tensor& x, const Tensor& pos, Tensor k_cache,
                                        Tensor v_cache) const {
  const int64_t B = x.size(0), C = x.size(2), hs = C / n_head, block = k_cache.size(2);
  EMBER_CHECK(x.size(1) == 1 && k_cache.dim() == 4 && k_cache.size(0) == B &&
                  k_cache.size(1) == n_head && k_cache.size(3) == hs && v_cache.sizes() == k_cache.sizes(),
              "GPT::decode_step: one position [B, 1, C] over caches [B, n_head, block, head], got x ",
              x.shape_str(), " and caches ", k_cache.shape_str(), ", ", v_cache.shape_str(),
              " (make them with GPT::preallocated_cache)");
  std::vector<Tensor> qkv = c_attn->forward(x).split(n_embd, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, 1, n_head, hs}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  TensorOptions ids(DType::Int64);
  ids.device = x.device();
  const Tensor slots = arange(block, ids);
  // This position's key and value into its slot (compiled, the slot mask, the same in every
  // layer, is built once a step); then attention over the slots up to this position, one
  // kernel on a GPU. It takes the caches whole, never a view of them (a view of a tensor
  // written earlier in a graph would break a compiled step into pieces).
  const Tensor here = slots.eq(pos).view({1, 1, block, 1});
  k_cache.copy_(where(here, k.to(k_cache.dtype()), k_cache));
  v_cache.copy_(where(here, v.to(v_cache.dtype()), v_cache));
  Tensor y = cached_attention(q, k_cache.to(q.dtype()), v_cache.to(q.dtype()), pos);
  y = y.transpose(1, 2).contiguous().view({B, 1, C});
  return c_proj->forward(y);
}

Tensor CausalSelfAttention::prefill(const Tensor& x, Tensor k_cache, Tensor v_cache) const {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head,
                block = k_cache.size(2);
  EMBER_CHECK(k_cache.dim() == 4 && k_cache.size(0) == B && k_cache.size(1) == n_head &&
                  k_cache.size(3) == hs && v_cache.sizes() == k_cache.sizes() && T <= block,
              "GPT::prefill: positions [B, T, C] over caches [B, n_head, block, head] with T <= "
              "block, got x ", x.shape_str(), " and caches ", k_cache.shape_str(), ", ",
              v_cache.shape_str(), " (make them with GPT::preallocated_cache)");
  std::vector<Tensor> qkv = c_attn->forward(x).split(n_embd, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  // The caches' new contents whole: these keys and values, then what the caches hold past T
  // (read before they are written, so no view of a written tensor is read).
  auto filled = [&](const Tensor& fresh, const Tensor& cache) {
    const Tensor f = fresh.to(cache.dtype());
    return T == block ? f : cat({f, cache.slice(2, T, block)}, 2);
  };
  k_cache.copy_(filled(k, k_cache));
  v_cache.copy_(filled(v, v_cache));
  Tensor y = scaled_dot_product_attention(q, k, v, /*is_causal=*/true, 0.0);
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  return c_proj->forward(y);
}

MLP::MLP(const GPTConfig& c) : Module("MLP") {
  c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, c.bias));
  gelu = register_module("gelu", std::make_shared<GELU>(false));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, c.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor MLP::forward(const Tensor& x) const {
  return dropout->forward(c_proj->forward(gelu->forward(c_fc->forward(x))));
}

Block::Block(const GPTConfig& c) : Module("Block") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(c));
}

Tensor Block::forward(const Tensor& x) const {
  Tensor h = x + attn->forward(ln_1->forward(x));
  return h + mlp->forward(ln_2->forward(h));
}

Tensor Block::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                             int64_t block) const {
  Tensor h = x + attn->forward_cached(ln_1->forward(x), k_cache, v_cache, pos, block);
  return h + mlp->forward(ln_2->forward(h));
}

Tensor Block::decode_step(const Tensor& x, const Tensor& pos, Tensor k_cache,
                          Tensor v_cache) const {
  Tensor h = x + attn->decode_step(ln_1->forward(x), pos, std::move(k_cache), std::move(v_cache));
  return h + mlp->forward(ln_2->forward(h));
}

Tensor Block::prefill(const Tensor& x, Tensor k_cache, Tensor v_cache) const {
  Tensor h = x + attn->prefill(ln_1->forward(x), std::move(k_cache), std::move(v_cache));
  return h + mlp->forward(ln_2->forward(h));
}

GPT::GPT(const GPTConfig& c) : Module("GPT"), config(c) {
  EMBER_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 &&
                  c.n_embd > 0,
              "GPT: every size in the config must be positive");
  transformer = register_module("transformer", std::make_shared<ModuleList>());
  wte = transformer->add("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = transformer->add("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = transformer->add("drop", std::make_shared<Dropout>(c.dropout));
  auto hl = transformer->add("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i)
    h.push_back(hl->add(std::to_string(i), std::make_shared<Block>(c)));
  ln_f = transformer->add("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.bias));
  lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false));
  init_weights();
  // Weight tying: the head reads the token embedding matrix.
  lm_head->tie_parameter("weight", wte->weight);
}

void GPT::init_weights() {
  // GPT-2 init: normal(0, 0.02) everywhere (done by the layers), residual projections scaled
  // by 1/sqrt(2 * n_layer).
  double proj_std = 0.02 / std::sqrt(2.0 * double(config.n_layer));
  for (auto& b : h) {
    init_normal_(b->attn->c_proj->weight, proj_std);
    init_normal_(b->mlp->c_proj->weight, proj_std);
  }
}

int64_t GPT::num_params_reported() const { return num_parameters() - wpe->weight.numel(); }

Tensor GPT::forward(const Tensor& idx) const {
  EMBER_CHECK(idx.dim() == 2, "GPT: idx must be [batch, time], got shape ", idx.shape_str());
  EMBER_CHECK(idx.dtype() == DType::Int64 || idx.dtype() == DType::Int32,
              "GPT: idx must hold integer token ids, got ", dtype_name(idx.dtype()));
  const int64_t T = idx.size(1);
  EMBER_CHECK(T <= config.block_size, "GPT: cannot forward a sequence of length ", T,
              ", the block size is only ", config.block_size);
  TensorOptions pos_opts(DType::Int64);
  pos_opts.device = idx.device();
  Tensor pos = arange(T, pos_opts);
  Tensor x = drop->forward(wte->forward(idx) + wpe->forward(pos));
  for (const auto& b : h) x = b->forward(x);
  return lm_head->forward(ln_f->forward(x));
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) const {
  EMBER_CHECK(idx.dim() == 2, "GPT: idx must be [batch, time], got shape ", idx.shape_str());
  EMBER_CHECK(idx.dtype() == DType::Int64 || idx.dtype() == DType::Int32,
              "GPT: idx must hold integer token ids, got ", dtype_name(idx.dtype()));
  EMBER_CHECK(!is_training(), "GPT::forward_cached runs in eval mode (call eval() first)");
  const int64_t T = idx.size(1), pos = cache.length;
  EMBER_CHECK(T > 0 && pos + T <= config.block_size, "GPT: positions ", pos, " to ", pos + T - 1,
              " do not fit the block size ", config.block_size, " (", pos,
              " cached); start a new KVCache for a new context");
  if (cache.k.empty()) {
    cache.k.resize(h.size());
    cache.v.resize(h.size());
  }
  TensorOptions pos_opts(DType::Int64);
  pos_opts.device = idx.device();
  Tensor x = wte->forward(idx) + wpe->forward(arange(double(pos), double(pos + T), 1, pos_opts));
  for (size_t i = 0; i < h.size(); ++i)
    x = h[i]->forward_cached(x, cache.k[i], cache.v[i], pos, config.block_size);
  cache.length = pos + T;
  return lm_head->forward(ln_f->forward(x));
}

KVCache GPT::preallocated_cache(int64_t batch) const {
  EMBER_CHECK(batch > 0, "GPT::preallocated_cache: the batch must be positive, got ", batch);
  TensorOptions o(wte->weight.dtype());
  o.device = wte->weight.device();
  KVCache cache;
  const int64_t hs = config.n_embd / config.n_head;
  for (size_t i = 0; i < h.size(); ++i) {
    cache.k.push_back(zeros({batch, config.n_head, config.block_size, hs}, o));
    cache.v.push_back(zeros({batch, config.n_head, config.block_size, hs}, o));
  }
  return cache;
}

Tensor GPT::decode_step(const Tensor& idx, const Tensor& pos, const std::vector<Tensor>& k,
                        const std::vector<Tensor>& v) const {
  EMBER_CHECK(idx.dim() == 2 && idx.size(1) == 1,
              "GPT::decode_step: idx must be [batch, 1] (one position), got shape ", idx.shape_str());
  EMBER_CHECK(idx.dtype() == DType::Int64 || idx.dtype() == DType::Int32,
              "GPT::decode_step: idx must hold integer token ids, got ", dtype_name(idx.dtype()));
  EMBER_CHECK(pos.numel() == 1 && pos.dtype() == DType::Int64,
              "GPT::decode_step: pos must be an int64 tensor of one element, got ",
              dtype_name(pos.dtype()), " ", pos.shape_str());
  EMBER_CHECK(k.size() == h.size() && v.size() == h.size(), "GPT::decode_step: ", h.size(),
              " layers need as many key and value caches, got ", k.size(), " and ", v.size(),
              " (make them with GPT::preallocated_cache)");
  EMBER_CHECK(!is_training(), "GPT::decode_step runs in eval mode (call eval() first)");
  const Tensor p = pos.reshape({1});
  Tensor x = wte->forward(idx) + wpe->forward(p);
  for (size_t i = 0; i < h.size(); ++i) x = h[i]->decode_step(x, p, k[i], v[i]);
  return lm_head->forward(ln_f->forward(x));
}

Tensor GPT::prefill(const Tensor& idx, const std::vector<Tensor>& k,
                    const std::vector<Tensor>& v) const {
  EMBER_CHECK(idx.dim() == 2 && idx.size(1) >= 1 && idx.size(1) <= config.block_size,
              "GPT::prefill: idx must be [batch, T] with 1 <= T <= block_size (",
              config.block_size, "), got shape ", idx.shape_str());
  EMBER_CHECK(idx.dtype() == DType::Int64 || idx.dtype() == DType::Int32,
              "GPT::prefill: idx must hold integer token ids, got ", dtype_name(idx.dtype()));
  EMBER_CHECK(k.size() == h.size() && v.size() == h.size(), "GPT::prefill: ", h.size(),
              " layers need as many key and value caches, got ", k.size(), " and ", v.size(),
              " (make them with GPT::preallocated_cache)");
  EMBER_CHECK(!is_training(), "GPT::prefill runs in eval mode (call eval() first)");
  const int64_t T = idx.size(1);
  TensorOptions pos_opts(DType::Int64);
  pos_opts.device = idx.device();
  Tensor x = wte->forward(idx) + wpe->forward(arange(T, pos_opts));
  for (size_t i = 0; i < h.size(); ++i) x = h[i]->prefill(x, k[i], v[i]);
  return lm_head->forward(ln_f->forward(x.slice(1, T - 1, T)));
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) const {
  Tensor logits = forward(idx);
  return cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}), -1);
}

Tensor GPT::generate(const Tensor& idx, int64_t max_new_tokens, double temperature,
                     int64_t top_k, const std::function<Tensor(const Tensor&)>& logits_of,
                     const DecodeFn& decode, const PrefillFn& prefill) {
  EMBER_CHECK(temperature > 0, "generate: temperature must be positive, got ", temperature);
  NoGradGuard no_grad;
  bool was_training = is_training();
  eval();
  Tensor seq = idx;
  KVCache cache;
  if (decode && max_new_tokens > 0) cache = preallocated_cache(idx.size(0));
  TensorOptions pos_opts(DType::Int64);
  pos_opts.device = idx.device();
  // The position decode reads: one tensor refilled each step, so a recorded step (a CUDA graph)
  // reads it where it lies instead of copying a new one in.
  Tensor pos = zeros({1}, pos_opts);
  // The newest token, also one tensor refilled each step (a tensor of its own layout: a slice
  // of seq would carry seq's strides, which change each step, and a compiled step guards on
  // them), so that a recorded step reads it in place rather than copying it in.
  Tensor last;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    int64_t T = seq.size(1);
    const bool fits = T <= config.block_size;
    Tensor cond = fits ? seq : seq.slice(1, T - config.block_size, T);
    Tensor logits;
    if (decode && fits && cache.length == T - 1) {
      pos.fill_(double(T - 1));
      if (last.defined() && last.sizes() == Shape{seq.size(0), 1} && last.dtype() == seq.dtype())
        last.copy_(seq.slice(1, T - 1, T));
      else
        last = seq.slice(1, T - 1, T).clone();
      logits = decode(last, pos, cache.k, cache.v);
      cache.length = T;
    } else if (decode && fits) {
      // The prompt: its keys and values into the preallocated cache.
      cache.length = 0;
      if (prefill) {
        logits = prefill(cond, cache.k, cache.v);
        cache.length = T;
      } else {
        logits = forward_cached(cond, cache);
      }
    } else if (logits_of) {
      logits = logits_of(cond);
    } else if (fits && cache.length == T - 1) {
      logits = forward_cached(seq.slice(1, T - 1, T), cache);  // the newest token alone
    } else {
      cache.length = 0;  // a new context, or a window that slid: every position again
      logits = forward_cached(cond, cache);
    }
    logits = logits.select(1, -1);
    // 16-bit logits (a model in bfloat16 or float16) are drawn from in float32.
    if (logits.dtype() == DType::BFloat16 || logits.dtype() == DType::Float16)
      logits = logits.to(DType::Float32);
    logits = logits / temperature;
    if (top_k > 0) {
      int64_t k = std::min(top_k, logits.size(-1));
      Tensor kth = logits.topk(k, -1).first.slice(1, k - 1, k);  // [B, 1]
      logits = logits.masked_fill(logits.lt(kth), -INFINITY);
    }
    Tensor probs = logits.softmax(-1);
    Tensor next = multinomial(probs, 1, false);
    seq = cat({seq, next}, 1);
  }
  train(was_training);
  return seq;
}

std::string GPTConfig::to_json() const {
  std::ostringstream os;
  os << "{\"block_size\": " << block_size << ", \"vocab_size\": " << vocab_size
     << ", \"n_layer\": " << n_layer << ", \"n_head\": " << n_head << ", \"n_embd\": " << n_embd
     << ", \"dropout\": " << dropout << ", \"bias\": " << (bias ? "true" : "false") << "}";
  return os.str();
}

GPTConfig GPTConfig::from_json(const std::string& text) {
  GPTConfig c;
  try {
    auto j = nlohmann::json::parse(text);
    c.block_size = j.at("block_size").get<int64_t>();
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.n_layer = j.at("n_layer").get<int64_t>();
    c.n_head = j.at("n_head").get<int64_t>();
    c.n_embd = j.at("n_embd").get<int64_t>();
    c.dropout = j.value("dropout", 0.0);
    c.bias = j.value("bias", true);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("GPTConfig: cannot read the model config '", text, "': ", e.what());
  }
  return c;
}

}  // namespace ember::nn
