#!/usr/bin/env python3
"""The calls prime-rl's trainer and orchestrator make, as its client makes them, against ringserve.

Written from PrimeIntellect-ai/prime-rl `src/prime_rl/utils/client.py` (read at 559b447,
2026-08-21): the same routes, bodies, query parameters and order, and the same reading of the
answers (`prefill_logprobs` takes the first value of each prompt_logprobs dict, as vLLM's
`GenerateResponse` keeps the JSON's key order). Standard library only: it shares no code or
assumption with ringserve.

    python3 ops/prime_rl_client.py --url http://127.0.0.1:8000 --adapter-dir DIR --max-model-len N

`--adapter-dir` must hold a LoRA adapter (adapter_config.json, adapter_model.safetensors). The
server must answer the legacy form by default (`--generate-format legacy`): prime-rl's
`prefill_logprobs` sends no `packed` and parses vLLM's list. Exit status 0 when every check
passes; each check prints one line, and a JSON summary ends the output.
"""
import argparse
import base64
import json
import struct
import sys
import time
import urllib.error
import urllib.request


class Failed(Exception):
    pass


def call(url, path, body=None, method="POST", timeout=60):
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"content-type": "application/json"}
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def raise_for_status(status, raw, what):
    if status >= 400:
        raise Failed(f"{what}: HTTP {status}: {raw[:300]!r}")


def check(cond, what):
    if not cond:
        raise Failed(what)
    print(f"ok   {what}")


def wait_for_health(url, deadline_s=60):
    # client.py check_health: GET /health until 200.
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            status, _ = call(url, "/health", method="GET", timeout=5)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise Failed("/health never answered 200")


def init_nccl_broadcast(url, host, port, timeout, world_size):
    # client.py init_nccl_broadcast: one admin client, rank_offset 0, no session_id.
    body = {
        "host": host,
        "port": port,
        "rank_offset": 0,
        "inference_world_size": world_size,
        "timeout": timeout,
        "quantize_in_weight_transfer": False,
    }
    status, raw = call(url, "/init_broadcaster", body)
    raise_for_status(status, raw, "/init_broadcaster")


def update_weights_in_memory(url):
    # client.py update_weights(weight_dir=None): pause (keep, no cache clear), update, resume.
    status, raw = call(url, "/pause?mode=keep&clear_cache=false")
    raise_for_status(status, raw, "/pause")
    try:
        status, raw = call(url, "/update_weights", {"weight_dir": None}, timeout=720)
        raise_for_status(status, raw, "/update_weights")
    finally:
        status, raw = call(url, "/resume")
        raise_for_status(status, raw, "/resume")


def load_lora_adapter(url, name, path):
    # client.py load_lora_adapter: retried on 404 and 500 (NFS delays), raise_for_status otherwise.
    for attempt in range(10):
        status, raw = call(url, "/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if status not in (404, 500):
            raise_for_status(status, raw, "/load_lora_adapter")
            return attempt
        time.sleep(min(2**attempt, 10))
    raise Failed(f"/load_lora_adapter kept answering {status}")


def generate(url, body):
    status, raw = call(url, "/inference/v1/generate", body)
    raise_for_status(status, raw, "/inference/v1/generate")
    return json.loads(raw)


def validate_generate_response(r):
    """What vLLM's pydantic GenerateResponse requires of the fields prime-rl reads."""
    check(isinstance(r.get("request_id"), str), "response: request_id is a string")
    check(isinstance(r.get("choices"), list) and r["choices"], "response: choices is a list")
    pl = r.get("prompt_logprobs")
    if pl is None:
        return
    check(isinstance(pl, list), "response: prompt_logprobs is list[dict[int, Logprob] | None]")
    for entry in pl:
        if entry is None:
            continue
        for key, lp in entry.items():
            int(key)
            if not isinstance(lp, dict) or not isinstance(lp.get("logprob"), (int, float)):
                raise Failed(f"prompt_logprobs entry {key}: {lp!r} is not a Logprob")
            if lp.get("rank") is not None and not isinstance(lp["rank"], int):
                raise Failed(f"prompt_logprobs entry {key}: rank {lp['rank']!r}")
            if lp.get("decoded_token") is not None and not isinstance(lp["decoded_token"], str):
                raise Failed(f"prompt_logprobs entry {key}: decoded_token {lp['decoded_token']!r}")


def prefill_logprobs(url, model, token_ids):
    # client.py prefill_logprobs: the body, then the first value of each dict (0.0 for None).
    r = generate(url, {
        "model": model,
        "token_ids": token_ids,
        "sampling_params": {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "prompt_logprobs": 1},
    })
    validate_generate_response(r)
    flat = []
    for entry in r.get("prompt_logprobs") or []:
        if not entry:
            flat.append(0.0)
            continue
        first = next(iter(entry.values()))
        lp = first.get("logprob")
        flat.append(float(lp) if lp is not None else 0.0)
    return r, flat


def packed_floats(obj):
    raw = base64.b64decode(obj["data"])
    check(obj["dtype"] == "float32" and len(raw) == 4 * obj["shape"][0], "packed float32 array")
    return list(struct.unpack(f"<{obj['shape'][0]}f", raw))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--adapter-dir", required=True)
    ap.add_argument("--max-model-len", type=int, required=True)
    ap.add_argument("--model", default=None, help="the base model's served name (from /v1/models)")
    args = ap.parse_args()
    url = args.url.rstrip("/")
    summary = {}
    try:
        wait_for_health(url)
        status, raw = call(url, "/v1/models", method="GET")
        base = args.model or json.loads(raw)["data"][0]["id"]

        init_nccl_broadcast(url, "10.0.0.7", 29501, 1200, 8)
        print("ok   /init_broadcaster (NCCL body)")
        prompt = [(i * 7 + 3) % 500 for i in range(64)]
        sampling = {"max_tokens": 16, "temperature": 1.0, "seed": 3, "ignore_eos": True}
        before = generate(url, {"token_ids": prompt, "sampling_params": sampling})
        update_weights_in_memory(url)
        after = generate(url, {"token_ids": prompt, "sampling_params": sampling})
        check(before["choices"][0]["token_ids"] != after["choices"][0]["token_ids"],
              "update_weights {weight_dir: null}: the same seeded request samples anew")

        retries = load_lora_adapter(url, "policy", args.adapter_dir)
        print(f"ok   /load_lora_adapter (after {retries} retries)")
        status, raw = call(url, "/v1/models", method="GET")
        check(any(m["id"] == "policy" for m in json.loads(raw)["data"]), "/v1/models lists the adapter")
        lora = generate(url, {"model": "policy", "token_ids": prompt, "sampling_params": sampling})
        validate_generate_response(lora)
        check(lora["choices"][0]["token_ids"] != after["choices"][0]["token_ids"],
              "generate with the adapter's name samples other tokens than the base model")

        scored, flat = prefill_logprobs(url, "policy", prompt)
        check(len(flat) == len(prompt), f"prefill_logprobs: one logprob per token ({len(flat)})")
        check(flat[0] == 0.0 and scored["prompt_logprobs"][0] is None, "the leading token has none")
        check(all(-9999.0 <= lp <= 0.0 for lp in flat[1:]), "every other logprob is in [-9999, 0]")
        firsts = [next(iter(e)) for e in scored["prompt_logprobs"][1:]]
        check(firsts == [str(t) for t in prompt[1:]], "each dict's first key is the prompt token")
        ranks_ok = all(
            all(lp["rank"] >= 1 for lp in e.values()) and len(e) <= 2
            for e in scored["prompt_logprobs"][1:]
        )
        check(ranks_ok, "ranks >= 1, at most the prompt token and 1 candidate per position")
        packed = generate(url, {
            "model": "policy", "token_ids": prompt, "packed": True,
            "sampling_params": {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "prompt_logprobs": 1},
        })
        floats = packed_floats(packed["prompt_logprobs"])
        check(floats[0] == -9999.0 and all(
            abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(floats[1:], flat[1:])),
            "the packed form's float32 array holds the same logprobs")
        # On-policy distillation's use: score a sampled rollout. At temperature 1 with nothing
        # truncated the sampled logprobs are the raw ones, so scoring gives them back.
        rollout = generate(url, {"model": "policy", "token_ids": prompt, "sampling_params": {
            "max_tokens": 24, "temperature": 1.0, "top_p": 1.0, "seed": 5, "ignore_eos": True,
            "logprobs": 0}})
        sampled = rollout["choices"][0]
        completion = sampled["token_ids"]
        _, rescored = prefill_logprobs(url, "policy", prompt + completion)
        drift = max(abs(e["logprob"] - lp) for e, lp in
                    zip(sampled["logprobs"]["content"], rescored[len(prompt):]))
        check(len(completion) == 24 and drift <= 1e-4,
              f"scoring a sampled rollout gives back its sampled logprobs (max drift {drift:.2e})")
        base_scored, base_flat = prefill_logprobs(url, base, prompt)
        check(base_flat != flat, "the base model scores the prompt differently from the adapter")

        room = args.max_model_len - len(prompt)
        past = generate(url, {"token_ids": prompt,
                              "sampling_params": {"max_tokens": room + 500, "ignore_eos": True}})
        choice = past["choices"][0]
        check(choice["finish_reason"] == "length" and len(choice["token_ids"]) == room,
              f"max_tokens past the context stops at max_model_len ({len(choice['token_ids'])} tokens)")

        status, raw = call(url, "/v1/unload_lora_adapter", {"lora_name": "policy"})
        check(status == 200, "/v1/unload_lora_adapter")
        summary = {"ok": True, "prompt_logprobs": len(flat), "completion_past_context": room}
    except Failed as err:
        print(f"FAIL {err}")
        summary = {"ok": False, "error": str(err)}
    print(json.dumps(summary))
    return 0 if summary.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
