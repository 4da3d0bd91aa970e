"""Whole models built from Hugging Face configs, with weights under Hugging Face names."""

from luminal.nn.models.bert import BertConfig, BertModel, bert_graph
from luminal.nn.models.gemma import GemmaForCausalLM, GemmaModel
from luminal.nn.models.gemma_config import GemmaConfig
from luminal.nn.models.generation import DecoderGraphs, decoder_graphs, greedy_generate
from luminal.nn.models.gpt2 import GPT2Config, GPT2LMHeadModel, GPT2Model
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from luminal.nn.models.loading import causal_lm, graph_from_folder, model_graph
from luminal.nn.models.sentence import SentenceConfig, SentenceEncoder, sentence_graph

__all__ = [
    "BertConfig",
    "BertModel",
    "DecoderGraphs",
    "GPT2Config",
    "GemmaConfig",
    "GemmaForCausalLM",
    "GemmaModel",
    "GPT2LMHeadModel",
    "GPT2Model",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaModel",
    "SentenceConfig",
    "SentenceEncoder",
    "bert_graph",
    "causal_lm",
    "decoder_graphs",
    "graph_from_folder",
    "greedy_generate",
    "model_graph",
    "sentence_graph",
]
