/* The TorchScript backend: any scripted/traced policy with the documented signature (policy.h). */
#include <sstream>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/script.h>

#include "inference/model/pi0cudasupport.h"
#include "inference/io/pi0error.h"
#include "inference/model/pi0policy.h"
#include "common/pi0file.h"

namespace pi0
{

namespace
{

class TorchScriptPolicy final : public Policy
{
public:
  TorchScriptPolicy (const std::string &path, const PolicyOptions &opts)
      : path_ (path), opts_ (opts)
  {
    if (opts_.dtype == at::kHalf)
      parse_dtype ("fp16"); // throws the explanation
    // torch::jit::load would wait forever on a FIFO with no writer.
    if (std::string err; !is_regular_file (path, &err))
      throw Error ("cannot load TorchScript policy " + err);
    try {
      module_ = torch::jit::load (path, opts_.device);
    } catch (const c10::Error &e) {
      throw Error ("cannot load TorchScript policy '" + path + "': " + e.what_without_backtrace ());
    }
    auto int_attr = [&] (const char *name, bool required) -> int {
      if (!module_.hasattr (name)) {
        if (required)
          throw Error ("TorchScript policy '" + path + "' has no int attribute '" + name +
                       "' (required: horizon, action_dim; see docs/model.md)");
        return 0;
      }
      c10::IValue v = module_.attr (name);
      if (!v.isInt ())
        throw Error ("TorchScript policy '" + path + "': attribute '" + name + "' must be an int");
      return static_cast<int> (v.toInt ());
    };
    spec_.model_type = "torchscript";
    spec_.horizon = int_attr ("horizon", true);
    spec_.action_dim = int_attr ("action_dim", true);
    spec_.num_views = int_attr ("num_views", false);
    spec_.image_size = int_attr ("image_size", false);
    spec_.max_tokens = int_attr ("max_tokens", false);
    spec_.state_dim = int_attr ("state_dim", false);
    if (spec_.horizon <= 0 || spec_.action_dim <= 0)
      throw Error ("TorchScript policy '" + path + "': horizon and action_dim must be positive");
    if (!module_.find_method ("forward"))
      throw Error ("TorchScript policy '" + path + "' has no forward method");
    if (opts_.dtype != at::kFloat)
      module_.to (opts_.dtype);
    module_.eval ();
  }

  at::Tensor infer (const PolicyInput &in, StageTimings *timings) override
  {
    c10::InferenceMode guard;
    auto bad = [&] (const std::string &what) {
      throw Error ("TorchScript policy '" + path_ + "': " + what);
    };
    if (in.guidance.prefix.defined ())
      bad ("real-time chunking needs the policy's velocity, which a TorchScript module's forward "
           "does not expose: guidance is not supported by this backend");
    // Shape checks against the declared attributes; undeclared dims are the module's business.
    if (!in.images.defined () || in.images.dim () != 4)
      bad ("images must be [V,3,H,W]");
    if (spec_.num_views && in.images.size (0) != spec_.num_views)
      bad ("expected " + std::to_string (spec_.num_views) + " views");
    if (spec_.image_size &&
        (in.images.size (2) != spec_.image_size || in.images.size (3) != spec_.image_size))
      bad ("expected " + std::to_string (spec_.image_size) + "x" +
           std::to_string (spec_.image_size) + " views");
    if (!in.tokens.defined () || in.tokens.dim () != 1 || !in.token_mask.defined () ||
        in.token_mask.sizes () != in.tokens.sizes ())
      bad ("tokens and token_mask must be [L] each");
    if (spec_.max_tokens && in.tokens.size (0) != spec_.max_tokens)
      bad ("expected " + std::to_string (spec_.max_tokens) + " tokens");
    if (!in.state.defined () || in.state.dim () != 1)
      bad ("state must be [S]");
    at::Tensor state = in.state.to (at::kFloat);
    if (spec_.state_dim && state.size (0) > spec_.state_dim)
      bad ("state has more than " + std::to_string (spec_.state_dim) + " dims");
    if (spec_.state_dim && state.size (0) < spec_.state_dim)
      state = at::constant_pad_nd (state, {0, spec_.state_dim - state.size (0)}, 0.0);
    at::Tensor noise = in.noise.defined ()
                           ? in.noise.to (at::kFloat)
                           : noise_from_seed (in.seed, spec_.horizon, spec_.action_dim);
    if (noise.dim () != 2 || noise.size (0) != spec_.horizon || noise.size (1) != spec_.action_dim)
      bad ("noise must be [" + std::to_string (spec_.horizon) + "," +
           std::to_string (spec_.action_dim) + "]");
    at::Tensor masks =
        in.image_masks.defined () ? in.image_masks : at::ones ({in.images.size (0)}, at::kBool);

    const auto dev = opts_.device;
    std::vector<c10::IValue> args{in.images.to (dev, at::kFloat).unsqueeze (0),
                                  masks.to (dev, at::kBool).unsqueeze (0),
                                  in.tokens.to (dev, at::kLong).unsqueeze (0),
                                  in.token_mask.to (dev, at::kBool).unsqueeze (0),
                                  state.to (dev).unsqueeze (0),
                                  noise.to (dev).unsqueeze (0)};
    auto t0 = std::chrono::steady_clock::now ();
    c10::IValue out;
    try {
      out = module_.forward (args);
    } catch (const c10::Error &e) {
      bad (std::string ("forward failed: ") + e.what_without_backtrace ());
    } catch (const std::exception &e) { // the interpreter's own (torch::jit::JITException)
      bad (std::string ("forward failed: ") + e.what ());
    }
    if (!out.isTensor ())
      bad ("forward must return one Tensor");
    at::Tensor actions = out.toTensor ();
    if (actions.dim () == 3 && actions.size (0) == 1)
      actions = actions.squeeze (0);
    if (actions.dim () != 2 || actions.size (0) != spec_.horizon ||
        actions.size (1) != spec_.action_dim) {
      std::ostringstream os;
      os << "forward returned " << actions.sizes () << ", expected [1," << spec_.horizon << ","
         << spec_.action_dim << "]";
      bad (os.str ());
    }
    at::Tensor result = actions.to (at::kCPU, at::kFloat).clone ();
    if (timings) {
      *timings = StageTimings{};
      timings->total_ms =
          std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
              .count ();
      timings->denoise_ms = timings->total_ms; // opaque module: no stage split
    }
    return result;
  }

  const PolicySpec &spec () const override { return spec_; }
  c10::Device device () const override { return opts_.device; }
  at::ScalarType dtype () const override { return opts_.dtype; }
  std::string describe () const override
  {
    std::ostringstream os;
    os << "TorchScript (" << path_ << "), device " << opts_.device << ", "
       << c10::toString (opts_.dtype);
    return os.str ();
  }

private:
  std::string path_;
  PolicyOptions opts_;
  PolicySpec spec_;
  torch::jit::Module module_;
};

} // namespace

std::unique_ptr<Policy>
load_torchscript_policy (const std::string &path, const PolicyOptions &options)
{
  return std::make_unique<TorchScriptPolicy> (path, options);
}

} // namespace pi0
