#!/usr/bin/env python3
"""An independent client for ringserve's /inference/v1/generate, in Python with numpy only.

It talks to a running server the way an RL trainer's client would (stdlib HTTP, numpy decoding),
sharing no code with ringserve, and checks that every field of the contract decodes, that the
packed, legacy, msgpack and streamed forms agree, and that bad inputs get a 400 naming the field.

    python3 ops/numpy_client.py [--url http://127.0.0.1:8000]

Exit status 0 when every check passes; each check prints one line.
"""
import argparse
import base64
import json
import struct
import sys
import urllib.error
import urllib.request

import numpy as np

DTYPES = {"float32": np.float32, "int32": np.int32, "uint8": np.uint8, "uint16": np.uint16}


def post(url, body, accept="application/json", content_type="application/json"):
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"content-type": content_type, "accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=120) as res:
            return res.status, res.headers.get("content-type", ""), res.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("content-type", ""), err.read()


def unpack_msgpack(buf):
    """A minimal msgpack decoder (the subset a generate response uses), written from the spec."""
    pos = 0

    def take(n):
        nonlocal pos
        out = buf[pos:pos + n]
        pos += n
        return out

    def value():
        b = take(1)[0]
        if b <= 0x7f:
            return b
        if b >= 0xe0:
            return b - 0x100
        if 0x80 <= b <= 0x8f:
            return {value(): value() for _ in range(b & 0x0f)}
        if 0x90 <= b <= 0x9f:
            return [value() for _ in range(b & 0x0f)]
        if 0xa0 <= b <= 0xbf:
            return take(b & 0x1f).decode()
        fixed = {
            0xc0: lambda: None, 0xc2: lambda: False, 0xc3: lambda: True,
            0xc4: lambda: bytes(take(take(1)[0])),
            0xc5: lambda: bytes(take(struct.unpack(">H", take(2))[0])),
            0xc6: lambda: bytes(take(struct.unpack(">I", take(4))[0])),
            0xca: lambda: struct.unpack(">f", take(4))[0],
            0xcb: lambda: struct.unpack(">d", take(8))[0],
            0xcc: lambda: take(1)[0], 0xcd: lambda: struct.unpack(">H", take(2))[0],
            0xce: lambda: struct.unpack(">I", take(4))[0], 0xcf: lambda: struct.unpack(">Q", take(8))[0],
            0xd0: lambda: struct.unpack(">b", take(1))[0], 0xd1: lambda: struct.unpack(">h", take(2))[0],
            0xd2: lambda: struct.unpack(">i", take(4))[0], 0xd3: lambda: struct.unpack(">q", take(8))[0],
            0xd9: lambda: take(take(1)[0]).decode(),
            0xda: lambda: take(struct.unpack(">H", take(2))[0]).decode(),
            0xdb: lambda: take(struct.unpack(">I", take(4))[0]).decode(),
            0xdc: lambda: [value() for _ in range(struct.unpack(">H", take(2))[0])],
            0xdd: lambda: [value() for _ in range(struct.unpack(">I", take(4))[0])],
            0xde: lambda: {value(): value() for _ in range(struct.unpack(">H", take(2))[0])},
            0xdf: lambda: {value(): value() for _ in range(struct.unpack(">I", take(4))[0])},
        }
        if b not in fixed:
            raise ValueError(f"msgpack type 0x{b:02x} not expected in a generate response")
        return fixed[b]()

    return value()


def packed(obj):
    raw = obj["data"]
    raw = base64.b64decode(raw) if isinstance(raw, str) else raw
    arr = np.frombuffer(raw, dtype=np.dtype(DTYPES[obj["dtype"]]).newbyteorder("<"))
    assert arr.size == int(np.prod(obj["shape"])), "shape does not match the data"
    return arr.reshape(obj["shape"])


def arrays(choice):
    """Every per-token array of a choice, from whichever form it came in."""
    ids = choice["token_ids"]
    tokens = packed(ids) if isinstance(ids, dict) else np.array(ids, dtype=np.int32)
    if choice.get("completion_logprobs") is not None:
        logprobs = packed(choice["completion_logprobs"])
    else:
        logprobs = np.array([e["logprob"] for e in choice["logprobs"]["content"]], dtype=np.float32)
    mask = choice["sampling_mask"]
    if isinstance(mask, dict):
        counts, mask_ids = packed(mask["counts"]), packed(mask["ids"])
    else:
        counts = np.array([len(r) for r in mask], dtype=np.int32)
        mask_ids = np.array([i for r in mask for i in r], dtype=np.int32)
    routing = choice["routed_experts"]
    return {
        "tokens": tokens, "logprobs": logprobs, "counts": counts, "mask_ids": mask_ids,
        "routing": packed(routing), "start": routing["start"],
    }


def check_invariants(a, prompt_len):
    n = len(a["tokens"])
    assert len(a["logprobs"]) == n and len(a["counts"]) == n, "per-token lengths differ"
    assert int(a["counts"].sum()) == len(a["mask_ids"]), "CSR counts do not sum to the ids"
    offsets = np.concatenate([[0], np.cumsum(a["counts"])])
    for i, tok in enumerate(a["tokens"]):
        row = a["mask_ids"][offsets[i]:offsets[i + 1]]
        assert a["counts"][i] == 0 or tok in row, f"position {i}: sampled token not in its mask row"
    rows = a["routing"].shape[0]
    assert a["start"] == prompt_len + n - 1 - rows, "routing start formula"
    assert np.all(a["logprobs"] <= 0) and np.all(a["logprobs"] >= -9999), "logprob range"
    for layer_row in a["routing"].reshape(-1, a["routing"].shape[2]):
        assert len(set(layer_row.tolist())) == len(layer_row), "experts repeat within a layer"


def stream(url, body):
    status, _ctype, raw = post(url, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200, f"stream status {status}"
    parts, usage, done = [], None, False
    for event in raw.decode().split("\n\n"):
        if not event.startswith("data: "):
            continue
        payload = event[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        obj = json.loads(payload)
        assert "error" not in obj, obj
        if obj["choices"]:
            parts.append(arrays(obj["choices"][0]))
        else:
            usage = obj["usage"]
    assert done, "stream did not end with [DONE]"
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("tokens", "logprobs", "counts", "mask_ids")}
    cat["routing"] = np.concatenate([p["routing"] for p in parts])
    cat["start"] = parts[0]["start"]
    return cat, usage


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    args = parser.parse_args()
    gen = args.url + "/inference/v1/generate"
    models = json.loads(urllib.request.urlopen(args.url + "/v1/models").read())
    model = models["data"][0]
    print(f"ok  /v1/models: {model['id']} max_model_len={model['max_model_len']}")

    prompt = [(i * 7919) % 100_000 + 1 for i in range(32)]
    body = {"token_ids": prompt, "sampling_params": {
        "max_tokens": 64, "temperature": 1.0, "top_p": 0.97, "top_k": 512, "seed": 1234,
        "logprobs": 1, "ignore_eos": True, "return_sampling_mask": True, "return_routed_experts": True}}

    status, _, raw = post(gen, body)
    assert status == 200, raw
    res = json.loads(raw)
    for key in ("request_id", "model", "created", "choices", "usage", "prompt_logprobs", "kv_transfer_params"):
        assert key in res, f"missing {key}"
    assert res["request_id"].startswith("generate-tokens-")
    choice = res["choices"][0]
    for key in ("index", "finish_reason", "stop_reason", "logprobs", "token_ids", "completion_logprobs",
                "sampling_mask", "routed_experts"):
        assert key in choice, f"missing choices[0].{key}"
    base = arrays(choice)
    check_invariants(base, len(prompt))
    assert res["usage"]["completion_tokens"] == len(base["tokens"]) == 64
    print(f"ok  packed JSON: {len(raw)} bytes, {len(base['tokens'])} tokens, routing {base['routing'].shape} "
          f"{base['routing'].dtype}, {len(base['mask_ids'])} mask ids; invariants hold")

    forms = {}
    status, _, raw = post(gen, {**body, "packed": False})
    assert status == 200, raw
    forms["legacy"] = arrays(json.loads(raw)["choices"][0])
    status, ctype, raw = post(gen, body, accept="application/msgpack")
    assert status == 200 and "msgpack" in ctype, (status, ctype)
    forms["msgpack"] = arrays(unpack_msgpack(raw)["choices"][0])
    forms["stream"], usage = stream(gen, body)
    assert usage["completion_tokens"] == 64
    for name, a in forms.items():
        for key in ("tokens", "logprobs", "counts", "mask_ids", "routing"):
            assert np.array_equal(a[key], base[key]), f"{name}: {key} differs from the packed form"
        assert a["start"] == base["start"], f"{name}: routing start differs"
        print(f"ok  {name} form decodes to the same arrays as packed")

    bad = [
        ({"token_ids": [], "sampling_params": {}}, "token_ids"),
        ({"token_ids": [1, -5], "sampling_params": {}}, "token_ids[1]"),
        ({"token_ids": [1], "sampling_params": {"top_p": 1.5}}, "sampling_params.top_p"),
        ({"token_ids": [1], "sampling_params": {"top_k": "many"}}, "sampling_params.top_k"),
        ({"token_ids": [1], "sampling_params": {"stop": [""]}}, "sampling_params.stop[0]"),
        ({"token_ids": [1], "sampling_params": {"presence_penalty": 3}}, "sampling_params.presence_penalty"),
        ({"token_ids": [1], "sampling_params": {}, "cache_salt": ""}, "cache_salt"),
    ]
    for payload, param in bad:
        status, _, raw = post(gen, payload)
        err = json.loads(raw)["error"]
        assert status == 400 and err["code"] == 400 and err["param"] == param, (payload, status, err)
    print(f"ok  {len(bad)} bad inputs answered 400 naming the field")
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
