"""ndpkit inside Hugging Face transformers: ``attn_implementation="ndpkit"`` with an
``NdpkitCache`` generates with SmolLM2-135M-Instruct (a real model, its own tokenizer
and weights) the same tokens as transformers' eager attention, every card output
bit-exact to the golden model (model card in ``make test``; the RTL in ``make sim``,
bit-identical to the model card); models and inputs the engine cannot take are refused
before anything changes (a small random Llama)."""
import pytest
import torch

import ndpkit
from ndpkit.hf import NdpkitCache, check_config, compare, load_smollm2, register

PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "2 + 2 ="]
CARD = "engines=attention&data_width=128&mem_size=8M"   # the demo's card (one build)


@pytest.fixture(scope="module")
def smollm2():
    return load_smollm2()


def test_smollm2_generates_as_transformers_on_the_model_card(smollm2):
    tokenizer, model = smollm2
    with ndpkit.open(f"model?{CARD}") as dev:
        r = compare(model, tokenizer, PROMPTS, dev, max_new_tokens=4, fmt="fp16", verify=True)
    print({k: v for k, v in r.items() if k != "logits"})
    assert r["tokens"] == r["reference"] and r["agree"] == len(PROMPTS)
    assert r["texts"][0].startswith(" Paris")
    assert r["mismatches"] == 0                          # every card output equals the golden model
    assert len(r["cycles"]) == 3 and all(step == [0] * 30 for step in r["cycles"])   # steps x layers; no timing
    assert max(r["logit_diff"]) < 0.05                   # fp16 KV cache vs fp32 eager attention
    assert model.config._attn_implementation == "ndpkit"    # compare() restores it


@pytest.mark.sim
@pytest.mark.long
@pytest.mark.xdist_group("device_sim_llm")
def test_smollm2_on_the_rtl_is_bit_identical_to_the_model_card(smollm2):
    """`make sim`: the same generation on the simulated RTL card: the same tokens, every
    logit bit-identical to the model card's (so every attention output is)."""
    tokenizer, model = smollm2
    runs = {}
    for kind in ("model", "sim"):
        with ndpkit.open(f"{kind}?{CARD}") as dev:
            runs[kind] = compare(model, tokenizer, PROMPTS, dev, max_new_tokens=4, fmt="fp16", verify=True)
    assert runs["sim"]["tokens"] == runs["model"]["tokens"] == runs["model"]["reference"]
    assert all(torch.equal(a, b) for a, b in zip(runs["sim"]["logits"], runs["model"]["logits"]))
    assert runs["sim"]["mismatches"] == 0
    cycles = runs["sim"]["cycles"]                       # RTL: every layer's command takes cycles
    assert len(cycles) == 3 and all(len(step) == 30 and min(step) > 0 for step in cycles)
    print("sim engine cycles per decode step:", [sum(s) for s in cycles])


# -- a small random Llama: shapes, padding and refusals ---------------------------------

def _tiny(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM
    register()
    shape = dict(vocab_size=97, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256)
    shape.update(overrides)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape)).eval()
    model.set_attn_implementation("ndpkit")
    return model


def _batch():
    ids = torch.tensor([[0, 0, 0, 5, 6, 7], [1, 2, 3, 4, 5, 6]])       # left padding in row 0
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture
def dev():
    with ndpkit.open(f"model?{CARD}") as d:
        yield d


def test_padded_batch_follows_eager_attention(dev):
    """Prompts of different lengths (left padding: only real tokens go to the card) and
    grouped-query attention: logits within the fp16 cache's rounding of eager's."""
    model = _tiny()
    options = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True,
                   pad_token_id=0)
    cache = NdpkitCache(dev, model.config, batch_size=2, capacity=16)
    with torch.no_grad():
        ours = model.generate(**_batch(), cache=cache, **options)
    assert [cache.kv.length(0, s) for s in cache.slots] == [3 + 3, 6 + 3]   # real tokens + appended ones
    cache.close()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        ref = model.generate(**_batch(), **options)
    for a, b in zip(ours.logits, ref.logits):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=0)


def test_the_cache_keyword_and_the_old_past_key_values_one_agree(dev):
    """transformers 5 takes the cache as ``generate(cache=...)`` and warns that
    ``past_key_values=`` is deprecated; both give the same tokens and logits, bit for bit,
    as long as transformers takes the old keyword (then this test skips)."""
    import warnings
    import transformers
    if int(transformers.__version__.split(".")[0]) >= 6:        # transformers 5: "will be removed in 6.0.0"
        pytest.skip("this transformers no longer takes generate(past_key_values=...)")
    model = _tiny()
    options = dict(max_new_tokens=3, do_sample=False, output_logits=True, return_dict_in_generate=True,
                   pad_token_id=0)
    runs = {}
    for keyword in ("cache", "past_key_values"):
        cache = NdpkitCache(dev, model.config, batch_size=2, capacity=16)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            runs[keyword] = model.generate(**_batch(), **{keyword: cache}, **options)
        deprecated = [w for w in caught if "past_key_values" in str(w.message) and "deprecated" in str(w.message)]
        assert bool(deprecated) == (keyword == "past_key_values"), [str(w.message) for w in caught]
        assert [cache.kv.length(0, s) for s in cache.slots] == [3 + 2, 6 + 2]     # the card held the cache
        cache.close()
    assert torch.equal(runs["cache"].sequences, runs["past_key_values"].sequences)
    assert all(torch.equal(a, b) for a, b in zip(runs["cache"].logits, runs["past_key_values"].logits))


@pytest.mark.parametrize("overrides, field", [
    ({"head_dim": 32}, "head_dim: the model's is 32; the attention engine supports 64, 128"),
    ({"num_attention_heads": 34, "num_key_value_heads": 2}, "num_attention_heads / num_key_value_heads"),
    ({"num_attention_heads": 6, "num_key_value_heads": 4}, "num_attention_heads / num_key_value_heads"),
])
def test_models_the_engine_cannot_run_are_refused_at_setup(dev, overrides, field):
    from transformers import LlamaConfig
    shape = {"head_dim": 64, "num_attention_heads": 2, "num_key_value_heads": 2, **overrides}
    config = LlamaConfig(hidden_size=64 * shape["num_attention_heads"], num_hidden_layers=1, **shape)
    with pytest.raises(ValueError, match=field):
        check_config(config)
    free = dev.allocator.free_bytes
    with pytest.raises(ValueError, match=field):
        NdpkitCache(dev, config, batch_size=1, capacity=8)
    assert dev.allocator.free_bytes == free


def test_context_beyond_capacity_is_refused_before_the_step(dev):
    model = _tiny()
    cache = NdpkitCache(dev, model.config, batch_size=2, capacity=8)    # 6 prompt tokens + 2
    with pytest.raises(ValueError, match="capacity: a request holds 8 tokens and this step adds 1"):
        model.generate(**_batch(), cache=cache, max_new_tokens=5, do_sample=False, pad_token_id=0)
    lengths = [[cache.kv.length(layer, s) for s in cache.slots] for layer in range(2)]
    assert lengths == [[5, 8], [5, 8]]          # every layer as after the last step that fitted
    assert len({layer.get_seq_length() for layer in cache.layers}) == 1
    cache.close()


def test_a_cache_for_another_model_or_no_cache_is_refused(dev):
    model = _tiny()
    other = NdpkitCache(dev, _tiny(num_key_value_heads=1).config, batch_size=2, capacity=16)
    with pytest.raises(ValueError, match="another model"):
        model.generate(**_batch(), cache=other, max_new_tokens=2, do_sample=False, pad_token_id=0)
    other.close()
    with pytest.raises(ValueError, match="needs an ndpkit.hf.NdpkitCache"):
        model.generate(**_batch(), max_new_tokens=2, do_sample=False, pad_token_id=0)
    small = NdpkitCache(dev, model.config, batch_size=1, capacity=16)
    with pytest.raises(ValueError, match="batch_size=1"):
        model.generate(**_batch(), cache=small, max_new_tokens=2, do_sample=False, pad_token_id=0)
    small.close()


def test_two_cards_are_bit_identical_to_one(dev):
    """The batch split over two cards (a ShardedKVCache underneath) gives the same
    logits bit for bit as one card."""
    model = _tiny()
    options = dict(max_new_tokens=3, do_sample=False, output_logits=True, return_dict_in_generate=True,
                   pad_token_id=0)
    with ndpkit.open(f"model?{CARD}") as second:
        runs = []
        for devices in (dev, [dev, second]):
            cache = NdpkitCache(devices, model.config, batch_size=2, capacity=16)
            with torch.no_grad():
                runs.append(model.generate(**_batch(), cache=cache, **options))
            cache.close()
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    assert all(torch.equal(a, b) for a, b in zip(runs[0].logits, runs[1].logits))
