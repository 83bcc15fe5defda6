#!/usr/bin/env python3
"""Writes the hand-written seed corpus of the fuzz targets into fuzz/corpus/<target>/.

Run from anywhere: python3 fuzz/make_corpus.py. Each seed's file name says what it is; the
api_request seeds carry the 5-byte header that fuzz/api_request_fuzzer.cc describes. Inputs
the fuzzers found (crash regressions) are added to the corpus by hand as found-*.bin and are
not touched here.
"""
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(ROOT)

CHAT, COMPLETIONS, NATIVE = 0, 1, 2


def header(api, prefix_length, pad=b" ", amplify=None):
    flags = api
    count = 0
    if amplify is not None:
        flags |= 4
        count = amplify
    return bytes([flags]) + struct.pack("<H", prefix_length) + pad + bytes([count])


def native(prefix_length, body, group=None, component=None, amplify=None):
    h = bytearray(header(NATIVE, prefix_length, amplify=amplify))
    if group is not None:
        h[0] |= 8
    if component is not None:
        h[0] |= 16
    g = group or b""
    c = component or b""
    return bytes(h) + bytes([len(g), len(c)]) + g + c + body


def normalised(seed, fields=True, patterns=True):
    """A seed with key normalisation on (byte 0 bits 5 and 6)."""
    return bytes([seed[0] | (32 if fields else 0) | (64 if patterns else 0)]) + seed[1:]


def deep(n, open_=b"[", close=b"]", inner=b"1"):
    return open_ * n + inner + close * n


API = {
    # Valid requests.
    "chat_basic": header(CHAT, 1024) + b'{"model":"llama-3-70b","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Hi"}]}',
    "chat_group_stream": header(CHAT, 2048) + b'{"messages":[{"role":"user","content":"Hello"}],"model":"m","stream":true,"prompt_cache_key":"tenant-a","temperature":0.7,"max_tokens":16}',
    "chat_parts": header(CHAT, 40) + b'{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Describe "},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}},{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}},{"type":"file","file":{"file_id":"f-1"}}]},{"role":"assistant","content":[{"type":"refusal","refusal":"No."}]}]}',
    "chat_tool_calls": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":"list"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"a\\nb"}],"tools":[{"type":"function","function":{"name":"ls","parameters":{"type":"object"}}}]}',
    "chat_unicode_cut": header(CHAT, 7) + "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8 caf\u00e9 \U0001F600\"}]}".encode(),
    "chat_escapes": header(CHAT, 1024) + b'{"model":"m\\u0000x","messages":[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00 tab\\t quote\\" slash\\/ nul\\u0000"}]}',
    "chat_prefix_zero": header(CHAT, 0) + b'{"model":"m","messages":[{"role":"user","content":"x"}]}',
    "completions_string": header(COMPLETIONS, 5) + b'{"model":"m","prompt":"def fibonacci(n):\\n"}',
    "completions_strings": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":["first","second",""],"prompt_cache_key":null,"stream":null}',
    "completions_tokens": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":[1,2,3,18446744073709551615,0]}',
    "completions_token_arrays": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":[[1,2],[3],[]]}',
    # Key normalisation: canonical JSON with excluded fields and patterns (native), patterns (chat).
    "norm_native_noisy": normalised(native(64, b'{\n  "id": "req-0123abcd", "created": 1764460801,\n  "metadata": {"trace_id": "ab12", "client": "c"},\n  "inputs": "Instructions 2026-11-30 line\\u000aDoc \\u00e9 \\/",\n  "parameters": {"temperature": 0.70, "max_new_tokens": 1.0e2, "n": -0.0},\n  "a": [{"x": {"b": 1, "c": 2}}, 3]\n}')),
    "norm_native_dupes_numbers": normalised(native(1024, b'{"b":1,"a":[1e21,-5,18446744073709551615,123456789012345678901234567890],"b":"\\u0001"}'), patterns=False),
    "norm_native_amplified": normalised(native(2048, b'{"inputs":"\xffreq-0123abcd 2026-11-30 \xff"}', amplify=3)),
    "norm_chat_patterns": normalised(header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"system","content":"Current time 2026-11-30. req-0123abcd ok"},{"role":"user","content":[{"type":"text","text":"q 2026-11-30"}]}]}', fields=False),
    # Wrong types and values.
    "bad_token_ids": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":[18446744073709551616,-1,1.5,1e3,1e999]}',
    "bad_model_number": header(CHAT, 1024) + b'{"model":12,"messages":[{"role":"user","content":"x"}]}',
    "bad_stream": header(CHAT, 1024) + b'{"model":"m","stream":1e999,"messages":[{"role":"user","content":"x"}]}',
    "bad_content_atom": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":nul}]}',
    "bad_part_no_type": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]}',
    "bad_part_text_number": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}',
    "bad_group_long": header(CHAT, 1024) + b'{"model":"m","prompt_cache_key":"' + b"g" * 1025 + b'","messages":[{"role":"user","content":"x"}]}',
    "empty_arrays": header(CHAT, 1024) + b'{"model":"m","messages":[]}',
    "empty_prompt_array": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":[]}',
    "duplicate_messages": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}',
    "duplicate_model": header(COMPLETIONS, 1024) + b'{"model":"a","prompt":"x","model":"b"}',
    "root_array": header(CHAT, 1024) + b'[{"model":"m"}]',
    "root_scalar": header(COMPLETIONS, 1024) + b'"just a string"',
    "trailing_content": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":"x"} {"model":"n"}',
    # Broken JSON and broken UTF-8.
    "truncated": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":"unterminated',
    "trailing_comma": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":"x"},],}',
    "invalid_utf8": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":"bad \xc3\x28 overlong \xc0\xaf surrogate \xed\xa0\x80 end \xf4\x90\x80\x80"}]}',
    "lone_surrogate_escape": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":"\\ud800 then \\udc00x"}',
    "unescaped_control": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":"a\x01b\nc"}',
    # Deep nesting, in a digested part and in a skipped field.
    "deep_part": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":' + deep(70) + b'}]}]}',
    "deep_part_objects": header(CHAT, 1024) + b'{"model":"m","messages":[{"role":"user","content":[{"type":"x","v":' + deep(70, b'{"a":', b"}") + b'}]}]}',
    "deep_skipped": header(COMPLETIONS, 1024) + b'{"model":"m","prompt":"x","metadata":' + deep(2000) + b"}",
    "deep_unbalanced": header(CHAT, 1024) + b'{"model":"m","messages":' + b"[" * 3000,
    # Amplified: gigantic strings and long arrays from short inputs.
    "huge_content": header(CHAT, 65535, amplify=255) + b'{"model":"m","messages":[{"role":"user","content":"\xff' + "\u00e9\U0001F600ab\\n".encode() + b'\xff"}]}',
    "huge_prompt_tokens": header(COMPLETIONS, 4096, amplify=40) + b'{"model":"m","prompt":[\xff4294967296,\xff7]}',
    "many_messages": header(CHAT, 65535, amplify=10) + b'{"model":"m","messages":[\xff{"role":"user","content":"hi"},\xff{"role":"user","content":"end"}]}',
    "huge_skipped": header(COMPLETIONS, 1024, amplify=200) + b'{"model":"m","prompt":"x","junk":"\xffabcdefgh\xff"}',
    "huge_group": header(CHAT, 1024, amplify=1) + b'{"model":"m","prompt_cache_key":"\xffg\xff","messages":[{"role":"user","content":"x"}]}',
    # Padding that looks like more JSON must not change anything.
    "padding_digits": header(COMPLETIONS, 1024, pad=b"9") + b'{"model":"m","prompt":[1,2,3]}',
    "padding_digits_truncated": header(COMPLETIONS, 1024, pad=b"9") + b'{"model":"m","prompt":[1,2,3',
    "padding_quote": header(CHAT, 1024, pad=b'"') + b'{"model":"m","messages":[{"role":"user","content":"x"}]}',
    # Native invoke API.
    "native_json": native(1024, b'{"inputs":"Translate to French: good morning","parameters":{"max_new_tokens":20}}', b"tenant-1", b"ic-llama"),
    "native_short_prefix": native(8, b"0123456789abcdef", b"g"),
    "native_binary": native(1024, bytes(range(256)), None, b""),
    "native_bad_group_long": native(1024, b"body", b"x" * 65),
    "native_bad_group_control": native(1024, b"body", b"bad\x01group"),
    "native_empty": native(1024, b"", b"", None),
    "native_huge": native(65535, b"{\xffxyz\xff}", b"tenant", b"ic", amplify=255),
}

CONFIG_SOURCES = {"router_example.yaml": os.path.join(REPO, "examples", "router.yaml")}

CONFIG = {
    "minimal.yaml": "instances: [{url: http://127.0.0.1:8001}]\n",
    "full.yaml": """listen: 0.0.0.0:9090
io_threads: 4
decision_headers: false
routing: {routing_strategy: prefix-aware, prefix_length: 4096, concurrency_threshold: 16, spill_mode: least-loaded, balance_factor: 2.5}
pools:
  llama-3-70b: {routing_strategy: least-outstanding-requests, prefix_length: 8192}
  my-lora: ~
instances:
  - name: a
    url: http://10.0.0.1:8001/v2/
    weight: 3
    models: [llama-3-70b, my-lora]
  - url: http://gpu-b.internal
limits: {max_request_body_bytes: 1048576, max_header_bytes: 16384}
timeouts: {connect: 1.5, first_byte: 100, idle: 50, total: 600, client_read: 10, client_write: 20, client_idle: 30, drain: 0}
retries: {max_retries: 5}
health: {path: /healthz, interval: 0.5, timeout: 0.25, unhealthy_threshold: 4, healthy_threshold: 5, passive_failures: 0}
""",
    "ipv6.yaml": "listen: '[::1]:0'\ninstances:\n  - url: http://[fe80::1%eth0]:8001/base//\n  - url: HTTP://[::ffff:10.0.0.1]\n    models: single-name\n",
    "anchors.yaml": "routing: &r {routing_strategy: round-robin, prefix_length: 1024}\npools: {a: *r, b: *r}\ninstances: [{url: 'http://h:1', models: &m [a, b]}, {url: 'http://h:2', models: *m}]\n",
    "tags.yaml": "listen: !!str 127.0.0.1:1\nio_threads: !!int 3\ninstances: [{url: !!str http://h, weight: !!binary AAAA}]\n",
    "bad_types.yaml": "io_threads: [1]\nrouting: 5\ninstances: {url: x}\n",
    "bad_numbers.yaml": "io_threads: -0\nrouting: {prefix_length: 99999999999999999999999, balance_factor: .nan}\ntimeouts: {connect: inf, drain: -1e400}\ninstances: [{url: 'http://h:70000', weight: 0x10}]\n",
    "unknown_key.yaml": "instances: [{url: http://h, mdoels: [x]}]\nlisten_port: 1\n",
    "duplicate_key.yaml": "listen: a:1\nlisten: b:2\ninstances: [{url: http://h}, {url: http://h}]\n",
    "pool_unserved.yaml": "pools: {ghost: {prefix_length: 2048}}\ninstances: [{url: http://h, models: [real]}]\n",
    "null_sections.yaml": "routing:\npools:\ninstances:\n  - url: http://h\n    models:\nlimits:\ntimeouts:\nhealth:\n",
    "multi_document.yaml": "instances: [{url: http://a}]\n---\ninstances: [{url: http://b}]\n",
    "deep.yaml": "instances: " + "[" * 500 + "]" * 500 + "\n",
    "deep_maps.yaml": "routing: " + "{a: " * 300 + "1" + "}" * 300 + "\n",
    "not_a_map.yaml": "- just\n- a list\n",
    "block_scalars.yaml": "listen: >-\n  127.0.0.1:8080\ninstances:\n  - url: |\n      http://h\n    name: \"quoted\\tname\"\n",
    "weird_names.yaml": "pools: {'': {}, '~': {}, 'null': {}}\ninstances: [{name: 'has space', url: http://h}, {name: \"\\u00e9\", url: http://i}]\n",
    "bom_tabs.yaml": "\ufeffinstances:\n\t- url: http://h\n",
    "unterminated.yaml": "instances: [{url: 'http://h\n",
    "complex_key.yaml": "? [a, b]\n: 1\ninstances: [{url: http://h}]\n",
}

TRACE_SOURCES = {"example.jsonl": os.path.join(REPO, "examples", "trace-example.jsonl")}

TRACE = {
    "escaped_body_key.jsonl": '{"b\\u006fdy": {"a": "}{][\\"", "b": [1, {"c": null}]}, "max_tokens": 1e6}\n',
    "body_twice.jsonl": '{"body": {"a": 1}, "body": {"a": 2}}\n',
    "body_string.jsonl": '{"body": "raw \\u0000 bytes \\ud83d\\ude00", "routing_group": "g"}\n',
    "body_nested_quotes.jsonl": '{"meta": {"body": {"x": 1}}, "body" : { "k" : "v\\\\" , "n" : -0.0e-0 } , "label": "x"}\n',
    "crlf_comments.jsonl": '# comment\r\n\r\n   \r\n{"prompt": "a", "arrival_s": 0}\r\n  # indented comment\n{"prompt": "b", "arrival_s": 0}\n',
    "times_decrease.jsonl": '{"prompt": "a", "arrival_s": 2}\n{"prompt": "b", "arrival_s": 1}\n',
    "times_mixed.jsonl": '{"prompt": "a", "arrival_s": 2}\n{"prompt": "b"}\n',
    "huge_numbers.jsonl": '{"prompt": "a", "arrival_s": 1e400, "max_tokens": 18446744073709551616}\n',
    "max_tokens_fraction.jsonl": '{"prompt": "a", "max_tokens": 1.5}\n{"prompt": "a", "max_tokens": 1.0}\n',
    "api_forced.jsonl": '{"prompt": "p", "api": "chat"}\n{"messages": [{"role": "u", "content": null}], "api": "native", "routing_group": "has space"}\n{"body": {}, "api": "chat"}\n',
    "parts.jsonl": '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]}\n',
    "groups.jsonl": '{"prompt": "p", "routing_group": "' + "g" * 1025 + '"}\n{"body": {"a": 1}, "routing_group": "' + "g" * 65 + '"}\n',
    "deep_body.jsonl": '{"body": ' + "[" * 40 + "]" * 40 + "}\n",
    "deep_meta.jsonl": '{"prompt": "x", "meta": ' + "[" * 5000 + "]" * 5000 + "}\n",
    "invalid_utf8.jsonl": b'{"prompt": "\xc3\x28"}\n',
    "empty.jsonl": "\n# nothing\n",
    "not_object.jsonl": "[1, 2]\n",
    "unknown_field.jsonl": '{"prompt": "a", "max_token": 3}\n',
}


def mp(v):
    """A minimal msgpack writer for the kv_event_decoder seeds (ints, floats, str, bytes,
    lists, dicts, None)."""
    if v is None:
        return b"\xc0"
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        if v >= 0:
            return b"\xcf" + struct.pack(">Q", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, str):
        b = v.encode()
        return (bytes([0xA0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    if isinstance(v, bytes):
        return b"\xc4" + bytes([len(v)]) + v
    if isinstance(v, list):
        return bytes([0x90 | len(v)]) + b"".join(mp(x) for x in v) if len(v) < 16 else \
            b"\xdc" + struct.pack(">H", len(v)) + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        return bytes([0x80 | len(v)]) + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(v)


def stored_map(hashes, parent, tokens, bs, **extra):
    d = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
         "token_ids": tokens, "block_size": bs, "lora_id": None, "medium": "GPU",
         "lora_name": None}
    d.update(extra)
    return d


KV = {
    # peers.md section 5's worked example, both encodings
    "worked_array.bin": mp([1.5, [["BlockStored", [123], None, [1, 2], 2, None, "GPU", None]], 0]),
    "worked_map.bin": mp([1.5, [stored_map([123], None, [1, 2], 2)], 0]),
    # the real vLLM 0.26.0 shape (kthena #1535): extra keys, a hash above 2^63
    "vllm_0260.bin": mp([1789095808.84, [stored_map([15760518052499183552], None,
                                                    list(range(100, 116)), 16,
                                                    extra_keys=[None], group_idx=0,
                                                    kv_cache_spec_kind="full_attention")], 0]),
    "map_batch.bin": mp({"ts": 2.0, "events": [["AllBlocksCleared"],
                                               {"type": "BlockRemoved", "block_hashes": [5]}],
                         "data_parallel_rank": None}),
    "bytes_hashes.bin": mp([0.0, [["BlockStored", [bytes(range(32))], bytes(range(8)), [7, 8], 1,
                                   None, None, "lora"],
                                  ["BlockRemoved", [-1, bytes([1, 2])], "CPU"]], 3]),
    "unknown_event.bin": mp([0.0, [["BlockMoved", 1], {"type": "Other"}], None]),
}


def write(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    for name, data in API.items():
        write("api_request", name + ".bin", data)
    for name, src in CONFIG_SOURCES.items():
        with open(src, "rb") as f:
            write("gateway_config", name, f.read())
    for name, data in CONFIG.items():
        write("gateway_config", name, data)
    for name, src in TRACE_SOURCES.items():
        with open(src, "rb") as f:
            write("trace", name, f.read())
    for name, data in TRACE.items():
        write("trace", name, data)
    for name, data in KV.items():
        write("kv_event_decoder", name, data)


if __name__ == "__main__":
    main()
