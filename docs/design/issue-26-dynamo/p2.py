import json, sys
from dynamo.replay import run_trace_replay
cfg = json.loads(sys.argv[2]) if len(sys.argv)>2 else {}
def eng(wt, **kw):
    e = {"backend":"vllm","worker_type":wt,"block_size":16,"num_gpu_blocks":64,"max_num_seqs":8,
         "max_num_batched_tokens":512,"enable_prefix_caching":True,"enable_chunked_prefill":False,
         "timing_model":{"type":"fixed","prefill_ms":10.0,"decode_ms":1.0}}
    e.update(kw); return {"engine": e}
r = run_trace_replay([sys.argv[1]], prefill_engine_args=eng("prefill", **cfg.get("p",{})),
    decode_engine_args=eng("decode", **cfg.get("d",{})), num_prefill_workers=cfg.get("np",1), num_decode_workers=cfg.get("nd",1),
    trace_block_size=16, capture_per_request=True, **cfg.get("kw",{}))
d = r.to_dict()
keys = ["arrival_time_ms","input_length","output_length","first_admit_ms","prefill_worker_idx","decode_worker_idx","source_held_ms","destination_reserved_ms","destination_activated_ms","decode_admit_ms","source_released_ms","first_token_ms","last_token_ms","reused_input_tokens","decode_reused_input_tokens","readmission_count"]
for q in sorted(d["per_request"], key=lambda q:(q["arrival_time_ms"], q["input_length"])):
    print({k: q.get(k) for k in keys})
