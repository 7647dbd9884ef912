"""Writes a tiny, deterministic Llama and its tokenizer into a folder, for the real SGLang server
on CPU (`cargo xtask setup`; manual/guides/testing.md). Nothing comes from a model hub.

- The tokenizer: byte-level BPE trained with `tokenizers` on the fixed corpus below (every byte
  is in its alphabet, so any text encodes), with the ChatML specials and a ChatML chat template.
- The model: `LlamaForCausalLM` with random weights (seed 0), hidden size 64, 2 layers, 4
  attention heads over 2 KV heads, its vocabulary exactly the tokenizer's.

The same script gives the same bytes on every run. Outputs are random tokens, the same at
temperature 0: tests may compare token counts and shapes, never text.

usage: python tiny_model.py OUT_DIR
"""

import pathlib
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "You are a helpful assistant. Answer the question briefly.",
    "What is the capital of France? The capital of France is Paris.",
    "Write a haiku about the sea. Waves fold into foam.",
    "system user assistant tool function call arguments name content",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "0123456789 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \" \n",
] * 4
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def main(out):
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    fast.chat_template = CHATML
    fast.model_max_length = 4096
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
        bos_token_id=None,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(pathlib.Path(sys.argv[1]))
