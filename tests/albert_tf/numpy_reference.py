"""An independent NumPy forward pass of ALBERT, written from the original's spec.

It reads weights by their original checkpoint names (reference §3.2-3.3) and is
itself checked against the golden fixture before being used as a reference for
the sharing modes the original does not have.
"""

import math

import numpy as np


def _layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def forward(w, cfg, input_ids, input_mask, segment_ids, positions):
    """Returns dict(sequence_output, pooled_output, mlm_logits [B,P,V], sop_logits).

    Args:
        w: dict canonical name -> array (float64 is fine).
        cfg: dict with hidden_size, num_hidden_layers, num_attention_heads,
            inner_group_num, and the numbers of attention / FFN parameter groups
            ("attention_groups", "ffn_groups").
    """
    B, T = input_ids.shape
    H, N, L, K = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["inner_group_num"]
    D = H // N
    e = "bert/embeddings/"
    x = w[e + "word_embeddings"][input_ids] + w[e + "token_type_embeddings"][segment_ids]
    x = x + w[e + "position_embeddings"][:T][None]
    x = _layer_norm(x, w[e + "LayerNorm/gamma"], w[e + "LayerNorm/beta"])
    m = "bert/encoder/embedding_hidden_mapping_in/"
    if m + "kernel" in w:
        x = x @ w[m + "kernel"] + w[m + "bias"]
    bias = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
    for layer in range(L):
        ga = int(layer * cfg["attention_groups"] / L)
        gf = int(layer * cfg["ffn_groups"] / L)
        for k in range(K):
            pa = f"bert/encoder/transformer/group_{ga}/inner_group_{k}/"
            pf = f"bert/encoder/transformer/group_{gf}/inner_group_{k}/"

            def heads(name):
                y = x @ w[pa + f"attention_1/self/{name}/kernel"] + w[pa + f"attention_1/self/{name}/bias"]
                return y.reshape(B, T, N, D).transpose(0, 2, 1, 3)

            q, kk, v = heads("query"), heads("key"), heads("value")
            probs = _softmax(q @ kk.transpose(0, 1, 3, 2) / math.sqrt(D) + bias)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, H)
            a = ctx @ w[pa + "attention_1/output/dense/kernel"] + w[pa + "attention_1/output/dense/bias"]
            a = _layer_norm(a + x, w[pa + "LayerNorm/gamma"], w[pa + "LayerNorm/beta"])
            f = _gelu_tanh(a @ w[pf + "ffn_1/intermediate/dense/kernel"] + w[pf + "ffn_1/intermediate/dense/bias"])
            f = f @ w[pf + "ffn_1/intermediate/output/dense/kernel"] + w[pf + "ffn_1/intermediate/output/dense/bias"]
            x = _layer_norm(f + a, w[pf + "LayerNorm_1/gamma"], w[pf + "LayerNorm_1/beta"])
    pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    gathered = np.take_along_axis(x, positions[:, :, None], axis=1)
    p = "cls/predictions/"
    t = _gelu_tanh(gathered @ w[p + "transform/dense/kernel"] + w[p + "transform/dense/bias"])
    t = _layer_norm(t, w[p + "transform/LayerNorm/gamma"], w[p + "transform/LayerNorm/beta"])
    mlm_logits = t @ w["bert/embeddings/word_embeddings"].T + w[p + "output_bias"]
    sop_logits = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    return dict(sequence_output=x, pooled_output=pooled, mlm_logits=mlm_logits, sop_logits=sop_logits)
