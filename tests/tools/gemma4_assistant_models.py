"""The models stage of gemma4_assistant_fixtures.py: trains the target and the plain assistant,
derives the ordered assistant, saves them into WORK and converts them to GGUF (with the centroid
tensors the converter drops added back)."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from gemma4_assistant_common import (BOS, CONFIG_TARGET, DATA, F, K_DRAFT, NUM_CENTROIDS, OUT, S, SEED_ASSIST,
                                     SEED_CENTROIDS, SEED_TARGET, TARGET, TRAIN_ASSIST, TRAIN_CENTROIDS,
                                     TRAIN_TARGET, VOCAB, additive_mask, assistant_config, corpus_ids,
                                     load_target, lr_at, patch_hf, save_with_tokenizer, target_config,
                                     target_features, torch_setup, visible)
from gemma4_fixtures import quantize_with_binary, vendored_gguf  # (same llama.cpp tools)


# ----------------------------------------------------------------------------------------------
# Target training
# ----------------------------------------------------------------------------------------------
def train_target(work: Path):
    torch = torch_setup()
    from transformers import Gemma4ForCausalLM

    cfg = target_config()
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(SEED_TARGET)
    model = Gemma4ForCausalLM(cfg).to(torch.float32)
    model.train()
    ids = np.array(corpus_ids(), dtype=np.int64)
    tr = TRAIN_TARGET
    opt = torch.optim.AdamW(model.parameters(), lr=tr["lr"], betas=(0.9, 0.98), weight_decay=0.0)
    rng = np.random.default_rng(SEED_TARGET)
    T, B = tr["seq_len"], tr["batch"]
    t0 = time.time()
    losses = []
    for step in range(tr["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tr["steps"], tr["lr"], tr["warmup"])
        starts = rng.integers(0, len(ids) - T, size=B)
        # <bos> + a window from anywhere in the corpus, predicting the window
        x = np.stack([np.concatenate([[BOS], ids[s:s + T - 1]]) for s in starts])
        y = np.stack([ids[s:s + T] for s in starts])
        out = model(input_ids=torch.from_numpy(x), use_cache=False)
        loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), torch.from_numpy(y).reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == tr["steps"] - 1:
            print(f"  target step {step}: loss {np.mean(losses[-50:]):.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    model.config._attn_implementation = "eager"
    save_with_tokenizer(model, work / TARGET)
    info = dict(tr, final_loss=round(float(np.mean(losses[-50:])), 4), train_tokens=int(len(ids)))
    (work / "target_training.json").write_text(json.dumps(info))
    print(f"target: {sum(p.numel() for p in model.parameters())} parameters, {info}, {time.time() - t0:.0f} s")


def greedy_data(target):
    """The target's greedy continuations (HF generate, KV cache, batches of 64, DATA['new_tokens'] tokens)
    of <bos> + DATA['prompt_len']-1 corpus tokens, from every DATA['stride']-th corpus offset."""
    import torch

    ids = np.array(corpus_ids(), dtype=np.int64)
    P = DATA["prompt_len"]
    starts = np.arange(0, len(ids) - P, DATA["stride"])
    seqs = np.stack([np.concatenate([[BOS], ids[s:s + P - 1]]) for s in starts])
    out = []
    for b in range(0, len(seqs), 64):
        x = torch.from_numpy(seqs[b:b + 64])
        with torch.no_grad():
            y = target.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                                max_new_tokens=DATA["new_tokens"], min_new_tokens=DATA["new_tokens"], pad_token_id=0)
        out.append(y.numpy())
    return np.concatenate(out)


# ----------------------------------------------------------------------------------------------
# Assistant training
# ----------------------------------------------------------------------------------------------
def build_assistant(ordered, seed):
    torch = torch_setup()
    from transformers import Gemma4AssistantForCausalLM

    torch.manual_seed(seed)
    m = Gemma4AssistantForCausalLM(assistant_config(ordered)).to(torch.float32)
    return m


def assistant_batch_forward(assistant, target_embed, target_scale, tokens, h_prev, pos, kv, masks):
    """HF modules, many draft queries at once: tokens [B,Q], h_prev [B,Q,Hb], pos [B,Q],
    kv {lt: (K [B,nkv,T,hd], V)}, masks {lt: additive [B,1,Q,T]} -> (logits, proj, hidden)."""
    import torch

    e = target_embed[tokens] * target_scale
    x = assistant.pre_projection(torch.cat([e, h_prev], dim=-1))
    out = assistant.model(inputs_embeds=x, attention_mask=masks, position_ids=pos, shared_kv_states=kv,
                          use_cache=False, output_hidden_states=True)
    hn = out.last_hidden_state
    return assistant.lm_head(hn), assistant.post_projection(hn), hn


def assistant_training_data(target, seqs):
    """Per sequence z: the target's hidden states / K/V / greedy choices g[q] = argmax logits at q.
    A query at position p (1 <= p <= T-K) feeds z[p] with h[p-1]; step j's label is g[p+j-1] and its
    token input (j > 1) z[p+j-1], valid while z[p+i] == g[p+i-1] for 1 <= i < j (the chain the target
    would have accepted)."""
    import torch

    logits, hidden, kv = [], [], {S: ([], []), F: ([], [])}
    for b in range(0, len(seqs), 64):
        lg, hd, k = target_features(target, seqs[b:b + 64])
        logits.append(lg.argmax(-1))
        hidden.append(hd)
        for lt in (S, F):
            kv[lt][0].append(k[lt][0])
            kv[lt][1].append(k[lt][1])
    g = torch.cat(logits)
    kv = {lt: (torch.cat(kv[lt][0]), torch.cat(kv[lt][1])) for lt in (S, F)}
    T = seqs.shape[1]
    ps = np.arange(1, T - K_DRAFT + 1)
    z = torch.as_tensor(seqs)
    labels, valid = [], []
    ok = torch.ones(len(seqs), len(ps), dtype=torch.bool)
    for j in range(1, K_DRAFT + 1):
        if j > 1:
            ok = ok & (z[:, ps + j - 1] == g[:, ps + j - 2])
        labels.append(g[:, ps + j - 1])
        valid.append(ok.clone())
    W = CONFIG_TARGET["sliding_window"]
    vis = {lt: np.stack([visible(p, T, lt, "hf", W) for p in ps]) for lt in (S, F)}
    masks = {lt: additive_mask(vis[lt])[None, None] for lt in (S, F)}  # [1,1,Q,T]
    return dict(seqs=z, hidden=torch.cat(hidden), kv=kv, ps=torch.as_tensor(ps), masks=masks,
                labels=torch.stack(labels), valid=torch.stack(valid))


def unrolled_loss(assistant, tgt_embed, tgt_scale, data, idx, k=K_DRAFT, extra=None):
    """Mean over the valid (sequence, position, step) entries of step j's loss, the K steps unrolled
    (step j's h input is step j-1's post_projection output; gradients flow through it)."""
    import torch

    seqs, hidden, ps = data["seqs"][idx], data["hidden"][idx], data["ps"]
    B, Q = len(idx), len(ps)
    kv = {lt: (data["kv"][lt][0][idx], data["kv"][lt][1][idx]) for lt in (S, F)}
    masks = {lt: data["masks"][lt].expand(B, 1, Q, -1) for lt in (S, F)}
    pos = ps[None].expand(B, Q)
    tok = seqs[:, ps]
    h = hidden[:, ps - 1]
    total, count = 0.0, 0
    for j in range(1, k + 1):
        logits, proj, hn = assistant_batch_forward(assistant, tgt_embed, tgt_scale, tok, h, pos, kv, masks)
        label, valid = data["labels"][j - 1][idx], data["valid"][j - 1][idx]
        if extra is None:
            per = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), label.reshape(-1), reduction="none")
        else:
            per = extra(hn, label)
        total = total + (per * valid.reshape(-1)).sum()
        count += int(valid.sum())
        if j < k:
            tok, h = seqs[:, ps + j], proj  # teacher forcing on the token
    return total / max(count, 1)


def train_assistant(work: Path, target, data):
    torch = torch_setup()
    assistant = build_assistant(False, SEED_ASSIST)
    assistant.config._attn_implementation = "eager"
    assistant.train()
    tr = TRAIN_ASSIST
    tgt_embed = target.model.embed_tokens.weight.detach()
    tgt_scale = torch.tensor(float(target.config.hidden_size) ** 0.5)
    params = [p for n, p in assistant.named_parameters()]
    opt = torch.optim.AdamW(params, lr=tr["lr"], betas=(0.9, 0.98), weight_decay=0.0)
    rng = np.random.default_rng(SEED_ASSIST)
    n = data["seqs"].shape[0]
    t0, losses = time.time(), []
    for step in range(tr["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tr["steps"], tr["lr"], tr["warmup"])
        idx = torch.as_tensor(rng.choice(n, size=tr["batch"], replace=False))
        loss = unrolled_loss(assistant, tgt_embed, tgt_scale, data, idx)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == tr["steps"] - 1:
            print(f"  assistant step {step}: loss {np.mean(losses[-50:]):.3f} ({time.time() - t0:.0f} s)", flush=True)
    assistant.eval()
    return assistant, dict(tr, final_loss=round(float(np.mean(losses[-50:])), 4))


def balanced_clusters(E, nc, seed):
    """Token ordering for the centroid head: spherical k-means (nc centres, numpy, seeded) on the
    assistant's output embedding rows, then a balanced assignment (every cluster VOCAB/nc tokens:
    tokens taken in order of their best score, each to its best centre with room). Returns the
    ordering (cluster c = ordering[c*per:(c+1)*per], ascending ids) and the centres."""
    X = E / np.linalg.norm(E, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    C = X[rng.choice(len(X), size=nc, replace=False)]
    for _ in range(25):
        a = np.argmax(X @ C.T, axis=1)
        for c in range(nc):
            if np.any(a == c):
                v = X[a == c].sum(0)
                C[c] = v / np.linalg.norm(v)
    per = len(X) // nc
    score = X @ C.T
    order = np.argsort(-score.max(1), kind="stable")
    room = [per] * nc
    assign = np.full(len(X), -1)
    for t in order:
        for c in np.argsort(-score[t], kind="stable"):
            if room[c] > 0:
                assign[t] = c
                room[c] -= 1
                break
    ordering = np.concatenate([np.sort(np.nonzero(assign == c)[0]) for c in range(nc)])
    assert sorted(ordering.tolist()) == list(range(len(X)))
    return ordering


def make_ordered(work: Path, target, plain, data):
    """The ordered assistant: the plain one's weights, token_ordering from balanced_clusters, and the
    centroids trained (everything else frozen) to put the target's next token's cluster on top."""
    torch = torch_setup()
    ordered = build_assistant(True, SEED_CENTROIDS)
    sd = plain.state_dict()
    missing, unexpected = ordered.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"masked_embedding.centroids.weight", "masked_embedding.token_ordering"}, \
        (missing, unexpected)
    E = ordered.lm_head.weight.detach().numpy()
    ordering = balanced_clusters(E, NUM_CENTROIDS, SEED_CENTROIDS)
    with torch.no_grad():
        ordered.masked_embedding.token_ordering.copy_(torch.as_tensor(ordering, dtype=torch.long))
    cluster_of = torch.empty(VOCAB, dtype=torch.long)
    per = VOCAB // NUM_CENTROIDS
    for c in range(NUM_CENTROIDS):
        cluster_of[torch.as_tensor(ordering[c * per:(c + 1) * per])] = c
    ordered.config._attn_implementation = "eager"
    ordered.eval()
    for p in ordered.parameters():
        p.requires_grad_(False)
    cen = ordered.masked_embedding.centroids.weight
    cen.requires_grad_(True)
    opt = torch.optim.Adam([cen], lr=TRAIN_CENTROIDS["lr"])
    tgt_embed = target.model.embed_tokens.weight.detach()
    tgt_scale = torch.tensor(float(target.config.hidden_size) ** 0.5)
    ce = lambda hn, label: torch.nn.functional.cross_entropy(
        ordered.masked_embedding.centroids(hn).reshape(-1, NUM_CENTROIDS), cluster_of[label].reshape(-1),
        reduction="none")
    rng = np.random.default_rng(SEED_CENTROIDS)
    n = data["seqs"].shape[0]
    t0, losses = time.time(), []
    for step in range(TRAIN_CENTROIDS["steps"]):
        idx = torch.as_tensor(rng.choice(n, size=16, replace=False))
        loss = unrolled_loss(ordered, tgt_embed, tgt_scale, data, idx, extra=ce)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == TRAIN_CENTROIDS["steps"] - 1:
            print(f"  centroids step {step}: loss {np.mean(losses[-50:]):.3f} ({time.time() - t0:.0f} s)", flush=True)
    cen.requires_grad_(False)
    return ordered, dict(TRAIN_CENTROIDS, final_loss=round(float(np.mean(losses[-50:])), 4),
                         clusters=NUM_CENTROIDS, per_cluster=per)


# ----------------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------------
def convert(model_dir: Path, outtype: str, out: Path, llama_cpp: Path):
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir),
           "--outtype", outtype, "--outfile", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"convert failed: {' '.join(cmd)}")
    skipped = sorted(set(re.findall(r"Skipping get tensor '([^']+)'", r.stdout + r.stderr)))
    print(f"  {out.name}: {out.stat().st_size} bytes" + (f" (converter skipped {skipped})" if skipped else ""))
    return r.stdout + r.stderr


def add_centroids(src: Path, dst: Path, model_dir: Path, llama_cpp: Path):
    """Copy src GGUF (keys and tensors in order) and append the centroid tensors + keys."""
    from safetensors.numpy import load_file

    gguf = vendored_gguf(llama_cpp)

    st = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        st.update(load_file(str(f)))
    cfg = json.loads((model_dir / "config.json").read_text())
    cent = st["masked_embedding.centroids.weight"].astype(np.float32)  # [nc, hidden]
    order = st["masked_embedding.token_ordering"].astype(np.int32)  # [vocab]
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch=arch, endianess=r.endianess)
    align = r.fields.get("general.alignment")
    if align is not None:
        w.data_alignment = int(align.contents())
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    w.add_bool(f"{arch}.use_ordered_embeddings", bool(cfg["use_ordered_embeddings"]))
    w.add_uint32(f"{arch}.num_centroids", int(cfg["num_centroids"]))
    w.add_uint32(f"{arch}.centroid_intermediate_top_k", int(cfg["centroid_intermediate_top_k"]))
    for t in r.tensors:
        assert t.tensor_type in (gguf.GGMLQuantizationType.F32,), (t.name, t.tensor_type)
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    name_c = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.MASKED_EMBD_CENTROIDS] + ".weight"
    name_o = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.MASKED_EMBD_ORDERING]
    w.add_tensor(name_c, cent)
    w.add_tensor(name_o, order)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"  {dst.name}: {dst.stat().st_size} bytes (+ {name_c} {list(cent.shape[::-1])} F32, "
          f"{name_o} [{order.shape[0]}] I32)")


def stage_models(work: Path, llama_cpp: Path, llama_bin: Path):
    torch_setup()
    patch_hf()
    work.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    train_target(work)
    target = load_target(work, attn="eager")
    t0 = time.time()
    seqs = greedy_data(target)
    np.save(work / "greedy_data.npy", seqs)
    print(f"greedy data: {seqs.shape} in {time.time() - t0:.0f} s")
    data = assistant_training_data(target, seqs)
    plain, info_plain = train_assistant(work, target, data)
    save_with_tokenizer(plain, work / "assistant_plain")
    ordered, info_ord = make_ordered(work, target, plain, data)
    save_with_tokenizer(ordered, work / "assistant_ordered")
    (work / "assistant_training.json").write_text(json.dumps({"assistant_plain": info_plain,
                                                              "assistant_ordered": info_ord}))
    convert(work / TARGET, "f32", OUT / "target.f32.gguf", llama_cpp)
    quantize_with_binary(llama_bin, OUT / "target.f32.gguf", OUT / "target.q8_0.gguf", "Q8_0")
    convert(work / "assistant_plain", "f32", OUT / "assistant_plain.f32.gguf", llama_cpp)
    log = convert(work / "assistant_ordered", "f32", work / "assistant_ordered.converter.f32.gguf", llama_cpp)
    (work / "assistant_ordered.converter.log").write_text(log)
    add_centroids(work / "assistant_ordered.converter.f32.gguf", OUT / "assistant_ordered.f32.gguf",
                  work / "assistant_ordered", llama_cpp)
