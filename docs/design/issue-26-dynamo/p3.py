import json, sys
from dynamo.replay import run_trace_replay
cfg = json.loads(sys.argv[2])
def eng(wt, **kw):
    e = {"backend":"vllm","worker_type":wt,"block_size":16,"num_gpu_blocks":64,"max_num_seqs":8,
         "max_num_batched_tokens":512,"enable_prefix_caching":True,"enable_chunked_prefill":False,
         "timing_model":{"type":"fixed","prefill_ms":10.0,"decode_ms":1.0}}
    e.update(kw); return {"engine": e}
ticks=[]
class Pol:
    def initial_tick_ms(self): return 0.0
    def on_tick(self, snap):
        ticks.append((snap.get("now_ms", snap.get("sampled_at_ms")), [ (f.get("worker_id"), f) for f in []]))
        return {}
r = run_trace_replay([sys.argv[1]], prefill_engine_args=eng("prefill", **cfg.get("p",{})),
    decode_engine_args=eng("decode", **cfg.get("d",{})), trace_block_size=16, capture_per_request=True)
d = r.to_dict()
for q in sorted(d["per_request"], key=lambda q:(q["arrival_time_ms"], q["first_token_ms"])):
    print({k: q.get(k) for k in ["arrival_time_ms","source_held_ms","destination_reserved_ms","destination_activated_ms","first_token_ms","last_token_ms","readmission_count","itl_ms","ttst_ms"]})
    print("  admissions", [(a["pool"], a["at_ms"], a["reused_input_tokens"], a["is_readmission"]) for a in q["admission_history"]])
print({k:v for k,v in d["summary"].items() if "preempt" in k or "duration" in k})
