"""A DeiT-tiny-style vision transformer (Touvron et al. 2021), defined here.

Patch embedding (a strided conv), a class token, learned position embeddings, pre-norm
blocks of multi-head self-attention and a GELU MLP with LayerNorm, and a linear head on
the class token: DeiT-tiny is 12 blocks of width 192 with 3 heads at 224x224 / patch 16
(5.7 M parameters). Attention is written out (MatMul, Softmax, Transpose) rather than
through a fused kernel, as most exported ViTs look to a converter.

The position embeddings fix the input size, so ``--arch`` (which calls without
arguments) takes one callable per size:

    build       DeiT-tiny, 224x224, patch 16        (196 patches)
    build_96    DeiT-tiny width/depth, 96x96, patch 8  (144 patches)
    build_32    DeiT-tiny width/depth, 32x32, patch 4  (64 patches)
    build_small_96 / build_small_32   4 blocks of width 96 (trains on a laptop CPU)
"""

from __future__ import annotations

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, image_size: int, patch: int, in_ch: int, dim: int):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image size {image_size} is not a multiple of the patch {patch}")
        self.num_patches = (image_size // patch) ** 2
        self.proj = nn.Conv2d(in_ch, dim, patch, patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, patches, dim)


class VisionTransformer(nn.Module):
    def __init__(self, num_classes: int = 10, image_size: int = 224, patch: int = 16,
                 dim: int = 192, depth: int = 12, heads: int = 3, mlp_ratio: float = 4.0,
                 in_ch: int = 3):
        super().__init__()
        self.patch_embed = PatchEmbed(image_size, patch, in_ch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def _init(model: VisionTransformer) -> None:
    """timm's ViT initialisation: truncated normal (0.02) for linears and embeddings."""
    nn.init.trunc_normal_(model.pos_embed, std=0.02)
    nn.init.trunc_normal_(model.cls_token, std=0.02)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build(num_classes: int = 10, image_size: int = 224, patch: int = 16, dim: int = 192,
          depth: int = 12, heads: int = 3, seed: int = 0) -> nn.Module:
    """A ViT with freshly initialised weights (DeiT-tiny by default), same for a seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return VisionTransformer(num_classes=num_classes, image_size=image_size, patch=patch,
                                 dim=dim, depth=depth, heads=heads).eval()


def build_96() -> nn.Module:
    return build(image_size=96, patch=8)


def build_32() -> nn.Module:
    return build(image_size=32, patch=4)


def build_small_96() -> nn.Module:
    return build(image_size=96, patch=8, dim=96, depth=4, heads=3)


def build_small_32() -> nn.Module:
    return build(image_size=32, patch=4, dim=96, depth=4, heads=3)
