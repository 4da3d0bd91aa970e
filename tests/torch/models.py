"""Small PyTorch models shared by the luminal.torch tests: shapes kept tiny because the reference
interpreter materialises every matmul product."""

from __future__ import annotations

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
        )

    def forward(self, x):
        return torch.log_softmax(self.net(x), -1)


class ConvNet(torch.nn.Module):
    """conv, batch norm (eval: running statistics), max and average pooling, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 10)
        with torch.no_grad():  # non-trivial running statistics, so eval-mode batch norm is really checked
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        y = torch.nn.functional.avg_pool2d(torch.sigmoid(self.conv2(y)), 1)
        return torch.softmax(self.fc(self.pool(y).flatten(1)), -1)


def encoder_layer() -> torch.nn.Module:
    return torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)


def tiny_bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=60,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    return BertModel(config)


def tiny_gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(vocab_size=60, n_embd=16, n_layer=2, n_head=2, n_positions=32, use_cache=False)
    return GPT2Model(config)


def tiny_llama() -> torch.nn.Module:
    """Grouped-query attention, RMSNorm, SwiGLU and rotary embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=60, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         use_cache=False)  # fmt: skip
    return LlamaForCausalLM(config)


def tiny_mistral() -> torch.nn.Module:
    """Llama's layers with a sliding attention window shorter than the sequence."""
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(vocab_size=60, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                           sliding_window=3, use_cache=False)  # fmt: skip
    return MistralForCausalLM(config)


def seeded(factory) -> torch.nn.Module:
    torch.manual_seed(0)
    return factory().eval()
