"""Fine-tuning examples: prompt masking, chat rendering, context truncation, packing and collation."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from esgexp.core.config import CONF_DIR
from esgexp.core.records import QAItem
from esgexp.strategies.qa import QAPrompter
from esgexp.training.sft_data import IGNORE_INDEX, Example, ExampleBuilder, SFTDataModule, collate, pack

TEMPLATE = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "template" / "qa.yaml"))
# A chat template whose generation prompt is a prefix of the rendering with the assistant turn.
EXTENDING_CHAT = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)
CONTEXT = (
    "In 2022 the group cut its Scope 1 emissions by 12 percent against the 2019 baseline. "
    "Renewable electricity covered 64 percent of the sites, up from 41 percent. "
    "Water withdrawal fell to 3.1 million cubic metres and waste to landfill to 2 percent. "
    "The board approved a net zero target for 2040 covering Scopes 1, 2 and 3."
)
ITEM = QAItem(
    id="q1",
    question="By how much did Scope 1 emissions fall in 2022?",
    answers=("12 percent",),
    qtype="factoid",
    context=(CONTEXT,),
)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def builder(tokenizer, max_seq_len=4096, chat_template=False, context="full") -> ExampleBuilder:
    return ExampleBuilder(QAPrompter(template=TEMPLATE, context=context), tokenizer, chat_template, max_seq_len)


def ids(tokenizer, text: str, special: bool = False) -> list[int]:
    return tokenizer(text, add_special_tokens=special)["input_ids"]


def test_labels_mask_exactly_the_prompt(tokenizer):
    """Prompt tokens are the evaluation prompt, labelled -100; the rest is " answer" + EOS, unmasked."""
    b = builder(tokenizer)
    (example,), report = b.build([ITEM])
    prompt = b.prompt_ids(ITEM)
    assert prompt == ids(tokenizer, QAPrompter(template=TEMPLATE, context="full").build(ITEM), special=True)
    n = len(prompt)
    assert example.input_ids[:n] == prompt
    assert example.labels[:n] == [IGNORE_INDEX] * n
    assert example.labels[n:] == example.input_ids[n:]
    answer = example.input_ids[n:]
    assert answer == [*ids(tokenizer, " 12 percent"), tokenizer.eos_token_id]
    assert tokenizer.decode(answer[:-1]) == " 12 percent"
    assert example.n_answer_tokens == len(answer)
    assert (report.n_items, report.n_examples, report.truncated, report.dropped) == (1, 1, [], [])


def test_chat_template_splits_the_rendering_at_the_generation_prompt(tiny_model_dir):
    """With a template that extends the prompt, prompt + answer tokens are the full chat rendering, split
    where the generation prompt ends; the answer part (its end-of-turn included) is unmasked."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = EXTENDING_CHAT
    b = builder(tok, chat_template=True)
    (example,), _ = b.build([ITEM])

    text = QAPrompter(template=TEMPLATE, context="full").build(ITEM)
    user = [{"role": "user", "content": text}]
    head = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template([*user, {"role": "assistant", "content": "12 percent"}], tokenize=False)
    assert full.startswith(head) and head.endswith("<s>assistant:")
    assert full[len(head) :] == " 12 percent</s>\n"

    prompt, answer = ids(tok, head, special=True), ids(tok, full[len(head) :])
    assert example.input_ids == prompt + answer
    assert example.labels == [IGNORE_INDEX] * len(prompt) + answer
    assert tok.eos_token_id in answer
    assert b.prompt_ids(ITEM) == prompt
    assert tok.decode(example.input_ids) == full


def test_chat_template_that_does_not_extend_falls_back_to_answer_and_eos(tokenizer):
    """The tiny model's template ends every rendering with 'assistant:', so the assistant turn does not extend
    the generation prompt: the answer becomes " answer" + EOS after the chat-formatted prompt."""
    b = builder(tokenizer, chat_template=True)
    (example,), _ = b.build([ITEM])
    text = QAPrompter(template=TEMPLATE, context="full").build(ITEM)
    head = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    prompt = ids(tokenizer, head, special=True)
    answer = [*ids(tokenizer, " 12 percent"), tokenizer.eos_token_id]
    assert example.input_ids == prompt + answer
    assert example.labels == [IGNORE_INDEX] * len(prompt) + answer


def test_truncation_cuts_the_end_of_the_context(tokenizer):
    """A too-long item loses the end of its passage only: it fits, tightly, with question and answer intact."""
    full = builder(tokenizer)
    (whole,), _ = full.build([ITEM])
    n_context = len(ids(tokenizer, CONTEXT))
    max_seq_len = len(whole.input_ids) - n_context // 2  # half the passage must go
    b = builder(tokenizer, max_seq_len=max_seq_len)
    (example,), report = b.build([ITEM])

    assert report.truncated == ["q1"] and report.dropped == []
    assert max_seq_len - 2 <= len(example.input_ids) <= max_seq_len  # cut no more than re-encoding needs
    answer = [*ids(tokenizer, " 12 percent"), tokenizer.eos_token_id]
    assert example.input_ids[-len(answer) :] == answer
    assert example.labels[-len(answer) :] == answer
    assert example.n_answer_tokens == len(answer)

    text = tokenizer.decode(example.input_ids[: -len(answer)])
    assert text.startswith(TEMPLATE["instruction"] + "Context:\n")
    assert text.endswith("\n\nQuestion: By how much did Scope 1 emissions fall in 2022?\nAnswer:")
    kept = text[
        len(TEMPLATE["instruction"] + "Context:\n") : -len(
            "\n\nQuestion: By how much did Scope 1 emissions fall in 2022?\nAnswer:"
        )
    ]
    assert kept and CONTEXT.startswith(kept)
    assert len(CONTEXT) // 3 < len(kept) < len(CONTEXT)


def test_drops_items_too_long_without_context_and_counts(tokenizer):
    """Items that cannot fit even without a passage are dropped; the report counts kept, cut and dropped."""
    long_question = "What did the report say about " + "water and energy use " * 80 + "?"
    no_context = QAItem(id="long", question=long_question, answers=("nothing",), qtype="non_factoid")
    with_context = QAItem(
        id="long-ctx", question=long_question, answers=("nothing",), qtype="non_factoid", context=(CONTEXT,)
    )
    short = QAItem(id="short", question="Target year?", answers=("2040",), qtype="factoid")
    (whole,), _ = builder(tokenizer).build([ITEM])
    max_seq_len = len(whole.input_ids) - 10
    assert len(builder(tokenizer).prompt_ids(no_context)) > max_seq_len

    examples, report = builder(tokenizer, max_seq_len=max_seq_len).build([short, no_context, ITEM, with_context])
    assert report.dropped == ["long", "long-ctx"]
    assert report.truncated == ["q1"]
    assert len(examples) == 2 and all(len(e.input_ids) <= max_seq_len for e in examples)
    assert report.as_metrics("train") == {
        "train/n_items": 4,
        "train/n_examples": 2,
        "train/n_truncated": 1,
        "train/n_dropped": 2,
    }


def test_no_context_strategy_does_not_truncate(tokenizer):
    """Without a context part in the prompt there is nothing to cut: a too-long item is dropped."""
    b = builder(tokenizer, context=None)
    n = len(b.build([ITEM])[0][0].input_ids)
    _, report = builder(tokenizer, max_seq_len=n - 1, context=None).build([ITEM])
    assert report.dropped == ["q1"] and report.truncated == []


def marked(index: int, length: int) -> Example:
    """An example whose first token (1000 + index) marks its start; its first half is prompt."""
    tokens = [1000 + index] + [index] * (length - 1)
    half = length // 2
    return Example(tokens, [IGNORE_INDEX] * half + tokens[half:])


def segments(row: Example) -> list[tuple]:
    starts = [i for i, t in enumerate(row.input_ids) if t >= 1000] + [len(row.input_ids)]
    return [
        (tuple(row.input_ids[a:b]), tuple(row.labels[a:b]), tuple(row.position_ids[a:b]))
        for a, b in itertools.pairwise(starts)
    ]


def test_pack_fills_rows_with_whole_examples():
    """Rows fit max_seq_len, hold every example once, restart positions per example, and are greedy."""
    rng = random.Random(3)
    examples = [marked(i, rng.randint(3, 12)) for i in range(15)]
    rows = pack(examples, max_seq_len=20, seed=7)

    assert all(len(r.input_ids) <= 20 for r in rows)
    assert all(len(r.input_ids) == len(r.labels) == len(r.position_ids) for r in rows)
    pieces = [s for r in rows for s in segments(r)]
    assert sorted(p[:2] for p in pieces) == sorted((tuple(e.input_ids), tuple(e.labels)) for e in examples)
    assert all(p[2] == tuple(range(len(p[0]))) for p in pieces)
    assert all(r.input_ids[0] >= 1000 for r in rows)  # every row starts with an example
    for row, following in itertools.pairwise(rows):  # greedy: the next row's first example did not fit
        assert len(row.input_ids) + len(segments(following)[0][0]) > 20
    assert all(e.position_ids is None for e in examples)  # the inputs are left alone


def test_pack_is_seeded():
    examples = [marked(i, 4 + i % 5) for i in range(12)]
    first = pack(examples, max_seq_len=16, seed=1)
    assert [r.input_ids for r in pack(examples, max_seq_len=16, seed=1)] == [r.input_ids for r in first]
    assert [r.input_ids for r in pack(examples, max_seq_len=16, seed=2)] != [r.input_ids for r in first]


def test_collate_unpacked_rows():
    """Right padding, an attention mask over the real tokens, -100 labels on padding, no position ids."""
    batch = collate([Example([5, 6, 7], [IGNORE_INDEX, 6, 7]), Example([8, 9], [IGNORE_INDEX, 9])], pad_id=0)
    assert set(batch) == {"input_ids", "labels", "attention_mask", "n_tokens"}
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [-100, 9, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["n_tokens"] == 5


def test_collate_packed_rows():
    """Packed rows get position ids, padding as its own segment from 0, and no attention mask."""
    rows = [
        Example([5, 6, 7, 8, 9], [IGNORE_INDEX, 6, IGNORE_INDEX, 8, 9], [0, 1, 0, 1, 2]),
        Example([10, 11], [IGNORE_INDEX, 11], [0, 1]),
    ]
    batch = collate(rows, pad_id=0)
    assert set(batch) == {"input_ids", "labels", "position_ids", "n_tokens"}
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [10, 11, 0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, -100, 8, 9], [-100, 11, -100, -100, -100]]
    assert batch["position_ids"].tolist() == [[0, 1, 0, 1, 2], [0, 1, 0, 1, 2]]
    assert batch["n_tokens"] == 7


@pytest.mark.parametrize("multiple, width", [(1, 3), (2, 4), (4, 4), (64, 64)])
def test_collate_pads_to_a_multiple(multiple, width):
    """Rows padded to the longest rounded up to the multiple: pad ids, -100 labels, mask 0; n_tokens unpadded."""
    batch = collate(
        [Example([5, 6, 7], [IGNORE_INDEX, 6, 7]), Example([8, 9], [IGNORE_INDEX, 9])],
        pad_id=0,
        pad_to_multiple_of=multiple,
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7] + [0] * (width - 3), [8, 9] + [0] * (width - 2)]
    assert batch["labels"].tolist() == [[-100, 6, 7] + [-100] * (width - 3), [-100, 9] + [-100] * (width - 2)]
    assert batch["attention_mask"].tolist() == [[1, 1, 1] + [0] * (width - 3), [1, 1] + [0] * (width - 2)]
    assert batch["n_tokens"] == 5
    packed = collate([Example([5, 6, 7], [IGNORE_INDEX, 6, 7], [0, 1, 0])], pad_id=0, pad_to_multiple_of=multiple)
    assert packed["position_ids"].tolist() == [[0, 1, 0, *list(range(width - 3))]]
    assert packed["labels"].tolist() == [[-100, 6, 7] + [-100] * (width - 3)]


def test_data_module_pads_every_batch_to_the_multiple():
    rows = [marked(i, 3 + 7 * i) for i in range(6)]  # 3 to 38 tokens
    data = SFTDataModule(rows, rows[:3], batch_size=2, pad_id=0, seed=0, pad_to_multiple_of=16)
    widths = {
        batch["input_ids"].shape[1] for loader in (data.train_dataloader(), data.val_dataloader()) for batch in loader
    }
    assert widths <= {16, 32, 48} and 48 in widths


def test_data_module_batches(tokenizer):
    """The train loader yields every row once per epoch, in an order fixed by the seed."""
    rows = [marked(i, 3 + i) for i in range(6)]

    def order(seed):
        loader = SFTDataModule(rows, rows[:2], batch_size=2, pad_id=0, seed=seed).train_dataloader()
        return [t for batch in loader for t in batch["input_ids"][:, 0].tolist()]

    assert sorted(order(5)) == [1000 + i for i in range(6)]
    assert order(5) == order(5)
    val = list(SFTDataModule(rows, rows[:2], batch_size=2, pad_id=0, seed=5).val_dataloader())
    assert len(val) == 1 and val[0]["input_ids"][:, 0].tolist() == [1000, 1001]


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross entropy of one row, labels shifted by one, -100 ignored."""
    return F.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=IGNORE_INDEX, reduction="sum")


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


def test_packed_loss_equals_separate_loss(tokenizer, tiny_model):
    """Examples packed in a row (position ids, no mask) score as when run alone: no cross-example attention,
    and the padding of a shorter packed row changes nothing either. use_cache=False: transformers derives the
    block-diagonal mask from position ids only when the forward pass has no cache (the training path's own
    forward is checked in test_lora_module)."""
    items = [
        ITEM,
        QAItem(
            id="q2",
            question="What share of sites used renewable power?",
            answers=("64 percent",),
            qtype="factoid",
            context=(CONTEXT[:120],),
        ),
        QAItem(id="q3", question="Target year?", answers=("2040",), qtype="factoid"),
    ]
    examples, _ = builder(tokenizer).build(items)

    @torch.no_grad()
    def alone(example):
        batch = collate([example], tokenizer.pad_token_id)
        logits = tiny_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return token_loss_sum(logits[0], batch["labels"][0])

    (row_ab,) = pack(examples[:2], max_seq_len=4096, seed=0)
    (row_c,) = pack(examples[2:], max_seq_len=4096, seed=0)
    batch = collate([row_ab, row_c], tokenizer.pad_token_id)
    assert "attention_mask" not in batch
    with torch.no_grad():
        logits = tiny_model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    packed = [token_loss_sum(logits[i], batch["labels"][i]) for i in range(2)]
    separate = [alone(e) for e in examples]

    torch.testing.assert_close(packed[0], separate[0] + separate[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[1], separate[2], rtol=1e-5, atol=1e-5)

    # Control: the same row with running positions lets the second example see the first.
    running = torch.arange(len(row_ab.input_ids)).unsqueeze(0)
    with torch.no_grad():
        leaky = tiny_model(input_ids=torch.tensor([row_ab.input_ids]), position_ids=running, use_cache=False).logits
    assert abs(float(token_loss_sum(leaky[0], torch.tensor(row_ab.labels)) - (separate[0] + separate[1]))) > 1e-3


def test_padding_to_a_multiple_leaves_the_loss_unchanged(tokenizer, tiny_model):
    """The training loss (mean over answer tokens, no KV cache as in LoraFineTuner) of unpacked and packed
    batches is the same padded to a multiple of 64 as padded to the longest row only."""
    items = [ITEM, QAItem(id="q3", question="Target year?", answers=("2040",), qtype="factoid")]
    examples, _ = builder(tokenizer).build(items)
    for rows in (examples, pack(examples, max_seq_len=4096, seed=0) + pack(examples[1:], max_seq_len=4096, seed=0)):
        tight, padded = (collate(rows, tokenizer.pad_token_id, pad_to_multiple_of=m) for m in (1, 64))
        assert padded["input_ids"].shape[1] % 64 == 0 and padded["input_ids"].shape[1] > tight["input_ids"].shape[1]
        with torch.no_grad():
            losses = [
                tiny_model(**{k: v for k, v in b.items() if k != "n_tokens"}, use_cache=False).loss
                for b in (tight, padded)
            ]
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
