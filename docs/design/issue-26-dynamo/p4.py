import json, sys
from dynamo.replay import run_trace_replay
def eng(wt, backend="vllm", **kw):
    e = {"backend":backend,"worker_type":wt,"block_size":16,"num_gpu_blocks":64,"max_num_seqs":8,
         "max_num_batched_tokens":512,"enable_prefix_caching":True,"enable_chunked_prefill":False,
         "timing_model":{"type":"fixed","prefill_ms":10.0,"decode_ms":1.0}, "kv_transfer_bytes_per_token":1000000, "kv_transfer_bandwidth":1.0}
    e.update(kw); return {"engine": e}
def run(label, **kw):
    try:
        r = run_trace_replay(["t1.jsonl"], trace_block_size=16, capture_per_request=True, report_jsonl_path="out.jsonl", **kw)
        q = r.to_dict()["per_request"][0]
        print(label, "OK ttft", q["ttft_ms"], "held", q.get("source_held_ms"), "act", q.get("destination_activated_ms"), "pw", q.get("prefill_worker_idx"), "dw", q.get("decode_worker_idx"))
        return q
    except Exception as e:
        print(label, "ERR", str(e)[:300])
q = run("vllm disagg", prefill_engine_args=eng("prefill"), decode_engine_args=eng("decode"))
print(sorted(q.keys()))
print(open("out.jsonl").readline()[:1500])
run("only prefill args", prefill_engine_args=eng("prefill"))
run("both args, worker_type aggregated", prefill_engine_args=eng("aggregated"), decode_engine_args=eng("aggregated"))
run("trtllm", prefill_engine_args=eng("prefill","trtllm"), decode_engine_args=eng("decode","trtllm"))
run("sglang", prefill_engine_args=eng("prefill","sglang",block_size=1), decode_engine_args=eng("decode","sglang",block_size=1))
run("mixed", prefill_engine_args=eng("prefill","vllm"), decode_engine_args=eng("decode","trtllm"))
run("kv_router", prefill_engine_args=eng("prefill"), decode_engine_args=eng("decode"), router_mode="kv_router", num_prefill_workers=2, num_decode_workers=2)
run("extra only with prefill worker_type", extra_engine_args=eng("prefill"))
run("sglang chunked", prefill_engine_args=eng("prefill","sglang",block_size=1,enable_chunked_prefill=True), decode_engine_args=eng("decode","sglang",block_size=1,enable_chunked_prefill=True))
