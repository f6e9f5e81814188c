"""LLM.tokenizer: encode / decode equal the CLI's tokenizer, apply_chat_template equals
`nanovllm chat --print-prompt` on the chat template cases of tests/data/chat."""
import json

import pytest
from conftest import SOURCE_DIR, run_cli

CASES = sorted((SOURCE_DIR / "tests" / "data" / "chat").glob("*.json"))


def test_encode_decode_equal_cli(cli, tiny_model, tiny_llm):
    tok = tiny_llm.tokenizer
    for text in ["Hello <|im_end|> world", "  spaces\n\ttabs", "émoji 🙂 日本語", "<think>x</think>"]:
        want = json.loads(run_cli(cli, "tokenize", "--model", tiny_model, "--text", text).stdout)
        assert tok.encode(text) == want
        assert tok.decode(want) == text
    ids = tok.encode("a<|im_end|>b")
    assert tok.decode(ids, skip_special_tokens=True) == "ab"
    assert tok.convert_ids_to_tokens(tok.convert_tokens_to_ids("<|im_end|>")) == "<|im_end|>"
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok("hi")["input_ids"] == tok.encode("hi")


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_chat_template_equals_cli(cli, tiny_model, tiny_llm, tmp_path, case):
    c = json.loads(case.read_text())
    kwargs = c.get("kwargs") or {}
    args = ["chat", "--model", tiny_model, "--print-prompt"]
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(c["messages"], ensure_ascii=False))
    args += ["--messages", messages]
    if c.get("tools") is not None:
        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps(c["tools"], ensure_ascii=False))
        args += ["--tools", tools]
    if not c.get("add_generation_prompt", False):
        args += ["--no-generation-prompt"]
    unsupported = set(kwargs) - {"enable_thinking"}  # the CLI passes enable_thinking only
    if "enable_thinking" in kwargs:
        args += ["--enable-thinking", "true" if kwargs["enable_thinking"] else "false"]
    r = run_cli(cli, *args, check=False)
    try:
        got = tiny_llm.tokenizer.apply_chat_template(
            c["messages"], tools=c.get("tools"), tokenize=False,
            add_generation_prompt=c.get("add_generation_prompt", False), **kwargs)
    except ValueError as e:  # the template raised: the CLI fails with the same message
        assert r.returncode != 0 and str(e) in r.stderr
        return
    if unsupported:
        assert r.returncode == 0 and got  # rendered; the CLI cannot pass these kwargs
        return
    assert r.returncode == 0, r.stderr
    assert got == r.stdout


def test_chat_template_signature(tiny_llm):
    tok = tiny_llm.tokenizer
    msgs = [{"role": "user", "content": "Hi"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    # transformers' defaults: tokenize=True, add_generation_prompt=False.
    assert tok.apply_chat_template(msgs) == tok.encode(tok.apply_chat_template(msgs, tokenize=False))
    assert not tok.apply_chat_template(msgs, tokenize=False).endswith("assistant\n")
    no_think = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                       enable_thinking=False)
    assert no_think == text + "<think>\n\n</think>\n\n"
    both = tok.apply_chat_template([msgs, msgs], tokenize=False)
    assert both == [tok.apply_chat_template(msgs, tokenize=False)] * 2
    d = tok.apply_chat_template(msgs, return_dict=True)
    assert d["input_ids"] == tok.apply_chat_template(msgs) and set(d["attention_mask"]) == {1}
    cont = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "Hel"}],
                                   tokenize=False, continue_final_message=True)
    assert cont.endswith("Hel")
    custom = tok.apply_chat_template(msgs, tokenize=False, chat_template=
                                     "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    assert custom == "[user]Hi"
    with pytest.raises(ValueError, match="messages must be a non-empty array"):
        tok.apply_chat_template([], tokenize=False)
