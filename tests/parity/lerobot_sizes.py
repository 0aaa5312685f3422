"""LeRobot 0.6.1's pi0 and pi0.5 at sizes of our choosing, for the parity scripts and the
training scripts (make_lerobot_golden.py, make_lerobot_pi05_golden.py, the RTC goldens,
lerobot_processor_parity.py, scripts/train_smooth_tiny.py, scripts/train_sim_pi0.py).

LeRobot fixes the Gemma widths by variant name (gemma_2b, gemma_300m), the PaliGemma vision
config, and in code SigLIP's MLP (4304), the projector (to 2048), the 257,152-entry token
embedding and the lm_heads. `patch_lerobot` sets the first two before a model is made and
`shrink` remakes the others after, before the weights are drawn: every module keeps its name and
role, nothing in the computation changes.

@dims is {"vision": {image_size, patch_size, width, depth, mlp_dim, num_heads},
"text": {width, depth, mlp_dim, num_heads, num_kv_heads, head_dim}, "expert": {...}}, read when
the patched functions run (a caller may change a size in place before it makes a model).
"""
from torch import nn


def sized_config_mapping(dims):
    """transformers' CONFIG_MAPPING, but "paligemma" makes a PaliGemma config whose vision tower
    is @dims["vision"] (read when a config is made): what a module that builds PaliGemma by
    CONFIG_MAPPING["paligemma"]() gets instead (LeRobot's modeling_pi0/pi05, openpi's
    gemma_pytorch)."""
    from transformers.models.auto import CONFIG_MAPPING

    def paligemma_config():
        c = CONFIG_MAPPING["paligemma"]()
        v, vision = c.vision_config, dims["vision"]
        v.hidden_size, v.num_hidden_layers = vision["width"], vision["depth"]
        v.num_attention_heads, v.patch_size = vision["num_heads"], vision["patch_size"]
        return c

    class Mapping(dict):
        def __getitem__(self, key):
            return paligemma_config if key == "paligemma" else CONFIG_MAPPING[key]

    return Mapping()


def patch_lerobot(modeling, dims, processor=None, tokenizer=None) -> None:
    """LeRobot's pi0 / pi0.5 module @modeling made at @dims: its Gemma variant table and its
    PaliGemma vision config. With @processor (the module's processor_pi0 / processor_pi05), its
    tokenizer step gets @tokenizer instead of loading google/paligemma-3b-pt-224 by name."""
    modeling.get_gemma_config = lambda name: modeling.GemmaConfig(
        **dims[{"gemma_2b": "text", "gemma_300m": "expert"}[name]])
    modeling.CONFIG_MAPPING = sized_config_mapping(dims)
    if processor is not None:
        processor.TokenizerProcessorStep.__post_init__.__globals__["AutoTokenizer"].from_pretrained = (
            lambda *a, **k: tokenizer)


def shrink(model, dims, vocab, lm_heads=False) -> None:
    """The modules of @model (a PI0Pytorch or PI05Pytorch) whose sizes LeRobot fixes in code,
    remade at @dims and @vocab: SigLIP's MLPs, the projector, the token embedding, and with
    @lm_heads the two unused lm_heads too (LeRobot's save_pretrained writes them; at a small
    vocabulary they are small)."""
    from transformers.models.gemma.modeling_gemma import GemmaTextScaledWordEmbedding

    vision, w = dims["vision"], dims["text"]["width"]
    pwe = model.paligemma_with_expert
    pg = pwe.paligemma.model
    for layer in pg.vision_tower.vision_model.encoder.layers:
        layer.mlp.fc1 = nn.Linear(vision["width"], vision["mlp_dim"])
        layer.mlp.fc2 = nn.Linear(vision["mlp_dim"], vision["width"])
    pg.multi_modal_projector.linear = nn.Linear(vision["width"], w)
    pg.language_model.embed_tokens = GemmaTextScaledWordEmbedding(vocab, w, 0, embed_scale=w ** 0.5)
    if lm_heads:
        pwe.paligemma.lm_head = nn.Linear(w, vocab, bias=False)
        pwe.gemma_expert.lm_head = nn.Linear(dims["expert"]["width"], vocab, bias=False)
