"""The hf stage of gemma4_assistant_fixtures.py: the target's greedy tokens, the drafters' steps
through HF's own candidate generator (checked against the reference drafter), HF's speculative
generate() and the clean loops, written as target.hf.json, drafts.hf.json and speculative.hf.json."""
import json
from pathlib import Path

import numpy as np

from gemma4_assistant_common import (ASSISTANTS, CONFIG_TARGET, DRAFT_CASES, F, K_DRAFT, OUT, PROMPTS, S,
                                     SEED_TARGET, STEPS, TARGET, TOP_K, Reference, load_assistant, load_target,
                                     patch_hf, prompt_ids, target_features, torch_setup, visible)
from gemma4_fixtures import dump_lines, fmt_row, top_entry, versions  # (same JSON style and versions)


# ----------------------------------------------------------------------------------------------
# HF references
# ----------------------------------------------------------------------------------------------
def hf_greedy(target, ids):
    import torch

    seq, tokens, tops, margins = list(ids), [], [], []
    first_logits = None
    hid = None
    with torch.no_grad():
        for i in range(STEPS):
            out = target(input_ids=torch.tensor([seq]), use_cache=False, output_hidden_states=True)
            logits = out.logits[0, -1].numpy().astype(np.float64)
            if i == 0:
                first_logits = logits.copy()
                hid = out.hidden_states[-1][0, -1].numpy().astype(np.float64)
            entry, margin, best = top_entry(logits, TOP_K)
            tops.append(entry)
            margins.append(margin)
            tokens.append(best)
            seq.append(best)
    return tokens, tops, margins, first_logits, hid


def vec_summary(v):
    v = np.asarray(v, dtype=np.float64)
    return {"first8": [float("%.7g" % x) for x in v[:8]], "l2": float("%.7g" % np.linalg.norm(v))}


def kv_sharing_info(cfg):
    modes = list(cfg.kv_sharing_modes)
    store = {cfg.layer_types[i]: i for i, m in enumerate(modes) if m == "store"}
    src = [store[cfg.layer_types[i]] if m == "reuse" else i for i, m in enumerate(modes)]
    return modes, src


def write_target_json(work: Path, run):
    target = load_target(work)
    cfg = target.config
    training = json.loads((work / "target_training.json").read_text())
    modes, src = kv_sharing_info(cfg)
    prompts = []
    for name, text in PROMPTS:
        ids = prompt_ids(text)
        tokens, tops, margins, first_logits, hid = run["greedy"][name]
        prompts.append("{" + ", ".join([
            f'"name": {json.dumps(name)}', f'"text": {json.dumps(text)}', f'"ids": {json.dumps(ids)}',
            f'"tokens": {json.dumps(tokens)}', f'"min_top2_margin": {float("%.4g" % min(margins))}',
            f'"hidden_last_prompt": {json.dumps(vec_summary(hid))}',
            '"top": [\n' + ",\n".join("    " + json.dumps(t, separators=(",", ":")) for t in tops) + "\n   ]",
            f'"last_prompt_logits": {fmt_row(first_logits)}']) + "}")
    head = {
        "source": "HF transformers Gemma4ForCausalLM, CPU, fp32, eager attention, use_cache=False "
                  "(full recompute per step), greedy",
        "versions": versions(),
        "model": TARGET,
        "gguf": "target.f32.gguf (target.q8_0.gguf: llama-quantize Q8_0 of it)",
        "seed": SEED_TARGET,
        "notes": "trained (AdamW, cosine lr) on <bos> + 63-token windows of CORPUS "
                 "(tests/tools/gemma4_fixtures.py) + tests/fixtures/text/public_domain.txt tokenized "
                 "with tests/fixtures/gemma4/tokenizer.json; tied embeddings, final logit softcap 30",
        "hf_config": json.loads((work / TARGET / "config.json").read_text()),
        "training": training,
        "layer_types": list(cfg.layer_types),
        "num_kv_shared_layers": cfg.num_kv_shared_layers,
        "kv_sharing_modes": modes,
        "kv_source_layer": src,
        "sliding_window": cfg.sliding_window,
        "steps": STEPS,
    }
    text = dump_lines(head, {"prompts": prompts})
    (OUT / "target.hf.json").write_text(text)
    print(f"  target.hf.json: {len(text)} bytes")


def hf_candidate_drafts(target, assistant, seq):
    """HF's own SinglePositionMultiTokenCandidateGenerator on the state 'target prefilled with seq
    (as generate() does it: DynamicCache recording its past, logits_to_keep=1), its greedy token
    appended'. Returns (t_next, hidden_in, steps with token_in/position/logits/proj)."""
    import torch
    from transformers import DynamicCache, GenerationConfig
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()
    with torch.no_grad():
        out = target(input_ids=torch.tensor([seq]), past_key_values=cache, use_cache=True, logits_to_keep=1,
                     output_hidden_states=True, return_shared_kv_states=True)
    t_next = int(out.logits[0, -1].argmax())
    gen = SinglePositionMultiTokenCandidateGenerator(assistant, target.get_input_embeddings(),
                                                     GenerationConfig(max_length=4096))
    rec = []
    orig = assistant.forward

    def spy(*a, **kw):
        r = orig(*a, **kw)
        rec.append(dict(embeds=kw["inputs_embeds"].detach().clone(), pos=int(kw["position_ids"][0, 0]),
                        logits=r.logits[0, -1].detach().clone(), proj=r.last_hidden_state[0, -1].detach().clone(),
                        kv_len={k: int(v[0].shape[2]) for k, v in kw["shared_kv_states"].items()}))
        return r

    assistant.forward = spy
    try:
        ids = torch.tensor([seq + [t_next]])
        cand, logits = gen.get_candidates(ids, model_kwargs={"attention_mask": torch.ones_like(ids)},
                                          model_outputs=out, is_first_iteration=False, n_last_matches=0)
    finally:
        del assistant.forward
    drafted = cand[0, len(seq) + 1:].tolist()
    hidden_in = out.hidden_states[-1][0, -1].detach()
    return t_next, hidden_in, rec, drafted


def draft_step_json(r, ordered, plain_argmax=None):
    d = {"step": r["step"], "token_in": r["token_in"], "position": r["position"], "argmax": r["argmax"]}
    d["post_projection_first8"] = vec_summary(r["proj"])["first8"]
    d["post_projection_l2"] = vec_summary(r["proj"])["l2"]
    if ordered:
        d["centroid_logits"] = [float("%.7g" % x) for x in np.asarray(r["centroid_logits"], dtype=np.float64)]
        d["centroid_top_k"] = [int(x) for x in r["top"]]
        d["mask_value"] = float("%.7g" % r["fill"])
        d["plain_argmax"] = int(plain_argmax)
    return d


def draft_cases(work: Path):
    """All draft cases, HF's and the reference's. Returns list of dicts (numbers as numpy)."""
    import torch

    target = load_target(work)
    W = target.config.sliding_window
    cases = []
    for name in ASSISTANTS:
        assistant = load_assistant(work, name)
        ref = Reference(target, assistant)
        ordered = assistant.config.use_ordered_embeddings
        for pname, L in DRAFT_CASES:
            ids = prompt_ids(dict(PROMPTS)[pname])
            greedy = hf_greedy_tokens(target, ids, L)
            seq = (ids + greedy)[:L]
            t_next, hidden_in, rec, drafted = hf_candidate_drafts(target, assistant, seq)
            _, hidden, kv = target_features(target, np.array([seq]))
            kv1 = {lt: (kv[lt][0][0], kv[lt][1][0]) for lt in (S, F)}
            assert torch.equal(hidden[0, -1], hidden_in) or float((hidden[0, -1] - hidden_in).abs().max()) < 1e-5
            for window in ("hf", "llamacpp"):
                vis = {lt: visible(L, L, lt, window, W) for lt in (S, F)}
                steps = ref.draft(t_next, hidden_in, L, kv1, vis)
                for j, r in enumerate(steps):
                    r["step"] = j + 1
                plain_argmax = [int(torch.argmax(r["plain"])) for r in steps]
                case = {"case": f"{pname}_L{L}", "assistant": name, "window": window, "seq": seq, "L": L,
                        "target_next": t_next, "hidden_in": vec_summary(hidden_in.numpy()),
                        "visible": {"full": [int(np.nonzero(vis[F])[0][0]), int(np.nonzero(vis[F])[0][-1])],
                                    "sliding": [int(np.nonzero(vis[S])[0][0]), int(np.nonzero(vis[S])[0][-1])]}}
                if window == "hf":
                    # HF's own steps are the fixture; the reference must agree with them
                    diff = 0.0
                    hf_steps = []
                    for j, (h, r) in enumerate(zip(rec, steps)):
                        assert h["pos"] == L and r["token_in"] == (t_next if j == 0 else drafted[j - 1])
                        diff = max(diff, float((h["logits"] - r["logits"]).abs().max()),
                                   float((h["proj"] - r["proj"]).abs().max()))
                        s = dict(r, logits=h["logits"], proj=h["proj"], argmax=int(torch.argmax(h["logits"])),
                                 token_in=(t_next if j == 0 else drafted[j - 1]), position=h["pos"])
                        hf_steps.append(s)
                    assert [s["argmax"] for s in hf_steps] == drafted, (drafted, [s["argmax"] for s in hf_steps])
                    assert diff < 1e-4, (name, pname, L, diff)
                    case.update(source="hf_candidate_generator", ref_vs_hf_max_abs_diff=float("%.3g" % diff),
                                hf_kv_len=rec[0]["kv_len"])
                    steps = hf_steps
                else:
                    case["source"] = "reference"
                case["steps"] = [dict(draft_step_json(r, ordered, pa), logits=r["logits"].numpy())
                                 for r, pa in zip(steps, plain_argmax)]
                cases.append(case)
    return cases


def hf_greedy_tokens(target, ids, L):
    import torch

    seq = list(ids)
    with torch.no_grad():
        while len(seq) < L:
            logits = target(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            seq.append(int(logits.argmax()))
    return seq[len(ids):]


def write_drafts_json(work: Path, cases):
    rows = []
    for c in cases:
        head = {k: v for k, v in c.items() if k != "steps"}
        srows = []
        for s in c["steps"]:
            meta = {k: v for k, v in s.items() if k != "logits"}
            lg = np.asarray(s["logits"], dtype=np.float64)
            if c["window"] == "hf":
                tail = ', "logits": ' + fmt_row(lg)
            else:  # the reference's llama.cpp-window steps: top-8 only (keeps the file small)
                order = np.argsort(-lg, kind="stable")[:TOP_K]
                tail = ', "top": ' + json.dumps([[int(t), float("%.7g" % lg[t])] for t in order], separators=(",", ":"))
            srows.append("    {" + json.dumps(meta, separators=(",", ":"))[1:-1] + tail + "}")
        rows.append("{" + json.dumps(head, separators=(",", ":"))[1:-1] + ', "steps": [\n' + ",\n".join(srows) + "\n  ]}")
    assistants = {}
    for name in ASSISTANTS:
        assistants[name] = {"gguf": f"{name}.f32.gguf",
                            "hf_config": json.loads((work / name / "config.json").read_text())}
    training = json.loads((work / "assistant_training.json").read_text())
    head = {
        "source": "HF transformers Gemma4AssistantForCausalLM driven by SinglePositionMultiTokenCandidateGenerator"
                  ".get_candidates (transformers/generation/candidate_generator.py), CPU, fp32, eager attention",
        "versions": versions(),
        "assistants": assistants,
        "training": training,
        "k": K_DRAFT,
        "sliding_window": CONFIG_TARGET["sliding_window"],
        "notes": "state: target prefilled with seq (positions 0..L-1); the first draft step feeds target_next "
                 "(the target's greedy token after seq) at position L with the target's post-final-norm hidden "
                 "state at L-1; step j>1 feeds step j-1's argmax with step j-1's post_projection output, same "
                 "position L, same target K/V. window 'hf': what HF does (sliding layers see the last W+1 cached "
                 "positions); window 'llamacpp': llama.cpp's mask (sliding sees L-W+1..L-1), computed by this "
                 "script's reference implementation (which matches HF to ref_vs_hf_max_abs_diff on the hf window). "
                 "logits carry no softcap; for assistant_ordered non-selected tokens hold mask_value.",
    }
    text = dump_lines(head, {"cases": rows})
    (OUT / "drafts.hf.json").write_text(text)
    print(f"  drafts.hf.json: {len(text)} bytes")


# ----------------------------------------------------------------------------------------------
# Speculative decoding: HF generate() and clean loops
# ----------------------------------------------------------------------------------------------
def hf_generate(target, assistant, ids):
    import torch
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

    rounds = []
    orig_get = SinglePositionMultiTokenCandidateGenerator.get_candidates
    orig_upd = SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy
    orig_fwd = assistant.forward
    kv_seen = []

    def get(self, input_ids, **kw):
        kv_seen.clear()
        cand, logits = orig_get(self, input_ids, **kw)
        n = cand.shape[1] - input_ids.shape[1]
        if n > 0:
            rounds.append({"pos": int(input_ids.shape[1] - 1), "drafted": n,
                           "drafts": cand[0, input_ids.shape[1]:].tolist(),
                           "kv_full_len": kv_seen[0][F], "kv_sliding_len": kv_seen[0][S]})
        return cand, logits

    def upd(self, input_ids, scores, num_matches):
        if rounds and "accepted" not in rounds[-1]:
            rounds[-1]["accepted"] = int(num_matches)
        return orig_upd(self, input_ids, scores, num_matches)

    def fwd(*a, **kw):
        kv_seen.append({k: int(v[0].shape[2]) for k, v in kw["shared_kv_states"].items()})
        return orig_fwd(*a, **kw)

    SinglePositionMultiTokenCandidateGenerator.get_candidates = get
    SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy = upd
    assistant.forward = fwd
    try:
        with torch.no_grad():
            out = target.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  assistant_model=assistant, do_sample=False, max_new_tokens=STEPS,
                                  pad_token_id=0)
    finally:
        SinglePositionMultiTokenCandidateGenerator.get_candidates = orig_get
        SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy = orig_upd
        del assistant.forward
    return out[0, len(ids):].tolist(), rounds


def clean_loop(target, ref, ids, first, window):
    """Speculative greedy decoding with a full target recompute per round: the drafter sees exactly
    the accepted positions < p. first: 'hf' (prefill the prompt, take its greedy token, then draft)
    or 'lcpp' (prefill prompt[:-1], draft from the last prompt token). Drafts per round:
    min(K, remaining - 1) as HF caps them."""
    W = CONFIG_TARGET["sliding_window"]
    P = len(ids)
    if first == "hf":
        logits, _, _ = target_features(target, np.array([ids]))
        seq = list(ids) + [int(logits[0, -1].argmax())]
    else:
        seq = list(ids)
    rounds = []
    while len(seq) - P < STEPS:
        p = len(seq) - 1  # position of the token fed (not yet in the target's cache)
        remaining = STEPS - (len(seq) - P)
        k = min(K_DRAFT, remaining - 1)
        _, hidden, kv = target_features(target, np.array([seq[:-1]]))
        drafts = []
        if k > 0 and p >= 1:
            kv1 = {lt: (kv[lt][0][0], kv[lt][1][0]) for lt in (S, F)}
            vis = {lt: visible(p, p, lt, window, W) for lt in (S, F)}
            drafts = [r["argmax"] for r in ref.draft(seq[-1], hidden[0, p - 1], p, kv1, vis, k=k)]
        logits, _, _ = target_features(target, np.array([seq + drafts]))
        sel = logits[0, p:].argmax(-1).tolist()  # target's choice after seq[:p+1], then after each draft
        n = 0
        while n < len(drafts) and drafts[n] == sel[n]:
            n += 1
        new = drafts[:n] + [sel[n]]
        new = new[:remaining]
        if drafts:
            rounds.append({"pos": p, "drafted": len(drafts), "accepted": n, "drafts": drafts})
        seq += new
    return seq[P:P + STEPS], rounds


def run_summary(name, how, tokens, rounds, greedy):
    drafted = sum(r["drafted"] for r in rounds)
    accepted = sum(r["accepted"] for r in rounds)
    return {"name": name, "how": how, "tokens": tokens, "equals_greedy": tokens == greedy, "drafted": drafted,
            "accepted": accepted, "acceptance": float("%.4g" % (accepted / drafted)) if drafted else None,
            "rounds": rounds}


def speculative_runs(work: Path, greedy_by_prompt):
    target = load_target(work)
    res = {}
    for name in ASSISTANTS:
        assistant = load_assistant(work, name)
        ref = Reference(target, assistant)
        for pname, text in PROMPTS:
            ids = prompt_ids(text)
            greedy = greedy_by_prompt[pname]
            runs = res.setdefault(pname, [])
            toks, rounds = hf_generate(target, assistant, ids)
            runs.append(run_summary(f"hf_generate_{name}", "target.generate(assistant_model=..., do_sample=False)",
                                    toks, rounds, greedy))
            for first, window in (("hf", "hf"), ("hf", "llamacpp"), ("lcpp", "llamacpp")):
                toks, rounds = clean_loop(target, ref, ids, first, window)
                runs.append(run_summary(f"clean_{first}_{window}_{name}",
                                        f"clean loop, first={first}, window={window}", toks, rounds, greedy))
    return res


def write_speculative_json(res, greedy_by_prompt):
    rows = []
    for pname, text in PROMPTS:
        runs = []
        for r in res[pname]:
            meta = {k: v for k, v in r.items() if k != "rounds"}
            runs.append("    {" + json.dumps(meta, separators=(",", ":"))[1:-1] + ', "rounds": [\n' +
                        ",\n".join("      " + json.dumps(x, separators=(",", ":")) for x in r["rounds"]) + "]}")
        rows.append("{" + f'"prompt": {json.dumps(pname)}, "ids": {json.dumps(prompt_ids(text))}, '
                    f'"greedy": {json.dumps(greedy_by_prompt[pname])}, "runs": [\n' + ",\n".join(runs) + "\n  ]}")
    totals = {}
    for pname in res:
        for r in res[pname]:
            t = totals.setdefault(r["name"].replace("_" + pname, ""), [0, 0, True])
            t[0] += r["drafted"]
            t[1] += r["accepted"]
            t[2] &= r["equals_greedy"]
    head = {
        "source": "HF transformers 5.23.0 generate(assistant_model=Gemma4AssistantForCausalLM) and this script's "
                  "clean loops (full target recompute per round, reference drafter), CPU fp32 eager",
        "versions": versions(),
        "k": K_DRAFT,
        "steps": STEPS,
        "totals": {k: {"drafted": v[0], "accepted": v[1], "acceptance": float("%.4g" % (v[1] / v[0])) if v[0] else None,
                       "all_equal_greedy": v[2]} for k, v in totals.items()},
        "notes": "rounds[].pos: position of the token fed to the drafter (= tokens in the target cache); "
                 "accepted: leading drafts equal to the target's greedy choice; the round then adds "
                 "accepted + 1 tokens. hf_generate rounds carry the K/V lengths HF handed the drafter.",
    }
    text = dump_lines(head, {"prompts": rows})
    (OUT / "speculative.hf.json").write_text(text)
    print(f"  speculative.hf.json: {len(text)} bytes")
    for k, v in head["totals"].items():
        print(f"    {k}: {v}")


def stage_hf(work: Path):
    torch_setup()
    patch_hf()
    results = []
    for attempt in range(2):  # second pass with the models reloaded: must be bit-identical
        target = load_target(work)
        greedy = {}
        for pname, text in PROMPTS:
            greedy[pname] = hf_greedy(target, prompt_ids(text))
        cases = draft_cases(work)
        spec = speculative_runs(work, {k: v[0] for k, v in greedy.items()})
        results.append((greedy, cases, spec))
    (g1, c1, s1), (g2, c2, s2) = results
    same = json.dumps(_plain(g1)) == json.dumps(_plain(g2)) and json.dumps(_plain(c1)) == json.dumps(_plain(c2)) \
        and json.dumps(s1) == json.dumps(s2)
    assert same, "HF outputs not deterministic across two runs"
    write_target_json(work, {"greedy": g1})
    write_drafts_json(work, c1)
    write_speculative_json(s1, {k: v[0] for k, v in g1.items()})


def _plain(x):
    import torch

    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.numpy().tolist()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x
