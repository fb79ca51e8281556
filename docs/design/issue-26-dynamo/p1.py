import json, sys
from dynamo.replay import run_trace_replay
def eng(wt, **kw):
    e = {"backend":"vllm","worker_type":wt,"block_size":16,"num_gpu_blocks":64,"max_num_seqs":8,
         "max_num_batched_tokens":512,"enable_prefix_caching":False,"enable_chunked_prefill":False,
         "timing_model":{"type":"fixed","prefill_ms":10.0,"decode_ms":1.0}}
    e.update(kw); return {"engine": e}
kw = json.loads(sys.argv[1]) if len(sys.argv)>1 else {}
r = run_trace_replay(["t1.jsonl"], prefill_engine_args=eng("prefill", **kw.get("p",{})),
    decode_engine_args=eng("decode", **kw.get("d",{})), num_prefill_workers=1, num_decode_workers=1,
    trace_block_size=16, capture_per_request=True)
d = r.to_dict() if hasattr(r,"to_dict") else r
print(json.dumps(d.get("per_request"), indent=1))
s = d["summary"]; print({k:v for k,v in s.items() if any(x in k for x in ("ttft","e2e","mode","worker","transfer","handoff","duration"))})
