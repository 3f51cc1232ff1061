#!/usr/bin/python3
"""An independent reference for `causeway train lm`: the same GPT and recipe in PyTorch.

Trains the model of docs/LM.md (GPT-2 layout: learned positions, pre-LayerNorm blocks,
causal self-attention, 4x GELU MLP, tied head) on a text file with the same data split,
batches, AdamW, clipping and learning-rate schedule as `causeway train lm`'s defaults, and
prints one JSON object per evaluation and a summary. Its purpose is to measure, on this
machine and this corpus, the loss the recipe reaches in another framework, so that
Causeway's figure is compared with a distribution rather than a single published number
(docs/BENCHMARKS.md, "Quality").

Needs Debian's PyTorch (`apt-get install python3-torch`); nothing in the build or the tests
uses it.

    /usr/bin/python3 scripts/reference_gpt.py --data tinyshakespeare.txt --seed 1

With `--device cuda` it is the baseline of the vulkan kind on an NVIDIA GPU (docs/BENCHMARKS.md,
"On an NVIDIA H200"); each timed step then ends with a device synchronisation.
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    from torch.nn import functional as F
except ImportError:
    sys.exit("reference_gpt.py needs PyTorch: apt-get install python3-torch, "
             "then run it with /usr/bin/python3")


class Block(nn.Module):
    def __init__(self, n_embd, n_head, bias, gelu):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd, elementwise_affine=True)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.attn_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.ln_2 = nn.LayerNorm(n_embd, elementwise_affine=True)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.gelu = nn.GELU(approximate=gelu)
        if not bias:
            self.ln_1.bias = None
            self.ln_2.bias = None

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        hs = c // self.n_head
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, context, n_layer, n_head, n_embd, bias, gelu):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(context, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, bias, gelu) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        if not bias:
            self.ln_f.bias = None
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):  # residual projections: GPT-2's scaled init
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # the head tied to the token embedding
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--no-bias", action="store_true")
    ap.add_argument("--gelu", choices=["none", "tanh"], default="tanh",
                    help="GELU form: tanh (GPT-2's, as causeway) or none (exact erf)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda for the baseline of the vulkan kind on an NVIDIA GPU")
    a = ap.parse_args()
    dev = torch.device(a.device)

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    text = open(a.data, encoding="utf-8").read()
    chars = sorted(set(text))
    index = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}
    gen = torch.Generator().manual_seed(a.seed)

    def batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - a.context, (a.batch,), generator=gen)
        x = torch.stack([d[i:i + a.context] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + a.context] for i in ix])
        return x.to(dev), y.to(dev)

    model = GPT(len(chars), a.context, a.layers, a.heads, a.embd, not a.no_bias, a.gelu).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)

    def lr_at(it):
        if it < a.warmup:
            return a.lr * (it + 1) / (a.warmup + 1)
        ratio = min(1.0, (it - a.warmup) / max(1, a.iters - a.warmup))
        return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)

    @torch.no_grad()
    def evaluate():
        model.eval()
        out = {}
        for split in ("train", "val"):
            out[split] = sum(model(*batch(split)).item() for _ in range(a.eval_batches)) / a.eval_batches
        model.train()
        return out

    start = time.time()
    train_s = 0.0
    last = None
    for it in range(a.iters + 1):
        if a.eval_every > 0 and (it % a.eval_every == 0 or it == a.iters):
            last = evaluate()
            print(json.dumps({"type": "eval", "iter": it, "train_loss": round(last["train"], 4),
                              "val_loss": round(last["val"], 4)}), flush=True)
        if it == a.iters:
            break
        t0 = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        loss = model(*batch("train"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()  # the step's kernels finished, as the timing says
        train_s += time.time() - t0
    tokens = a.iters * a.batch * a.context
    print(json.dumps({"type": "summary", "seed": a.seed, "torch": torch.__version__,
                      "threads": a.threads, "device": a.device, "parameters": sum(p.numel() for p in model.parameters()),
                      "final_val_loss": round(last["val"], 4) if last else None,
                      "final_train_loss": round(last["train"], 4) if last else None,
                      "tokens_per_s": round(tokens / train_s, 1), "wall_s": round(time.time() - start, 1)}),
          flush=True)


if __name__ == "__main__":
    main()
