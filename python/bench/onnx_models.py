#!/usr/bin/env python3
"""Exports the ONNX models Causeway's ONNX import is checked and measured on,
from PyTorch (Debian's python3-torch and python3-torchvision: scripts/install-deps.sh --bench), with random
weights (seeded), each with an input and PyTorch's output as .npy:

  resnet18          torchvision's ResNet-18, batch 32, 3x224x224
  gpt2_decoder      a GPT-2-shaped decoder: 12 layers, width 768, 12 heads,
                    vocabulary 50257, batch 8 x 128 tokens (exact GELU: Erf)
  tiny_resnet       ResNet's blocks at width 8 on 3x32x32, batch 4
  tiny_decoder      the decoder with 2 layers, width 32, 4 heads, vocab 64,
                    batch 2 x 16

The tiny ones are what the repository ships (tests/onnx_models/, tested by
python/tests/test_onnx.py without PyTorch); the full ones are for
python/bench/bench_onnx.py.

    python3 python/bench/onnx_models.py --out DIR [--only tiny]
"""
import argparse
import math
import os

import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).bool())

    def forward(self, x):
        b, t, c = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, h, c // h).transpose(1, 2)
        k = k.view(b, t, h, c // h).transpose(1, 2)
        v = v.view(b, t, h, c // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


class Decoder(nn.Module):
    """GPT-2's shape: token and position embeddings, pre-norm blocks, a
    final norm and the logits."""

    def __init__(self, vocab, width, layers, heads, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, heads, context) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def export(name, model, example, out, dynamic):
    model.eval()
    with torch.no_grad():
        want = model(example).numpy()
    path = os.path.join(out, f"{name}.onnx")
    torch.onnx.export(model, (example,), path, input_names=["input"], output_names=["output"],
                      opset_version=17, dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}
                      if dynamic else None)
    np.save(os.path.join(out, f"{name}_input.npy"), example.numpy())
    np.save(os.path.join(out, f"{name}_output.npy"), want)
    print(f"{path}: {os.path.getsize(path)} bytes, input {tuple(example.shape)}, "
          f"output {want.shape}")


def tiny_models():
    """(name, model, example input) of the shipped tiny models, seeded."""
    from torchvision.models.resnet import BasicBlock, ResNet

    class TinyResNet(ResNet):
        def __init__(self):
            super().__init__(BasicBlock, [1, 1, 1, 1], num_classes=10)
            # ResNet at width 8: stem and the four stages rebuilt narrow.
            self.inplanes = 8
            self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.layer1 = self._make_layer(BasicBlock, 8, 1)
            self.layer2 = self._make_layer(BasicBlock, 8, 1, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 8, 1, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 8, 1, stride=2)
            self.fc = nn.Linear(8, 10)

    torch.manual_seed(0)
    tiny = TinyResNet()
    for m in tiny.modules():  # running statistics that are not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return [("tiny_resnet", tiny, torch.randn(4, 3, 32, 32)),
            ("tiny_decoder", Decoder(64, 32, 2, 4, 16), torch.randint(0, 64, (2, 16)))]


def full_models():
    """(name, model, example input) of the benchmarked models, seeded."""
    from torchvision.models import resnet18
    torch.manual_seed(1)
    return [("resnet18", resnet18(weights=None), torch.randn(32, 3, 224, 224)),
            ("gpt2_decoder", Decoder(50257, 768, 12, 12, 128), torch.randint(0, 50257, (8, 128)))]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--only", choices=["tiny", "full"], default=None)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    models = []
    if a.only != "full":
        models += tiny_models()
    if a.only != "tiny":
        models += full_models()
    for name, model, example in models:
        export(name, model, example, a.out, dynamic=True)


if __name__ == "__main__":
    main()
