"""A Hugging Face transformers.Trainer run on backend "tessera" under `tessera run`:

    build/tessera run --island ascend=host:1 --island nvidia=host:1 -- \
        python tests/torch/hf_trainer_worker.py [--steps 12] [--ckpt-dir DIR] [--backend tessera] [--model gpt2|llama]

The model is built from a config (GPT2Config or LlamaConfig, a few layers, byte-level vocabulary of 256: no
tokenizer and no hub download); the corpus is a local text file that the worker writes itself (the Python
standard library's sources, as bytes). The Trainer wraps the model in DDP, whose gradients go through the
process group. Each rank exits 0 when its checks pass; failures print "FAIL ..."; 77 when transformers is
missing. Checks: the process group's backend is BACKEND; the training loss falls; the parameters are
bit-identical on every rank after the last step (tessera.torch.check_replicas); with --ckpt-dir the model's
state is saved through torch.distributed.checkpoint into Tessera's store (TesseraWriter, a TrainerCallback
every --ckpt-every steps and at the end) and loaded back (TesseraReader) into a fresh model bit-exact.

How the backend gets in: TrainingArguments(ddp_backend=...) accepts only the names it lists ("nccl", "gloo",
...: `choices` of the field, enforced by HfArgumentParser) and, on CPU ranks (use_cpu), Accelerate replaces
any name but "mpi" by "gloo" and then refuses the one asked for ("Your assigned backend tessera is not
available, please use gloo"). The way that works on CPU and CUDA ranks alike: initialise the default
process group first, `torch.distributed.init_process_group("tessera")`, and leave ddp_backend unset;
Accelerate's PartialState then finds torch.distributed initialised and uses that group as it is (its
`backend` attribute still says "gloo" on CPU ranks, "nccl" on CUDA ranks: a label, every collective goes
through the default group). On CUDA ranks `TrainingArguments(ddp_backend="tessera")` constructed in Python
(not through HfArgumentParser) also reaches init_process_group("tessera") (Accelerate keeps a name it is
given there).
"""
import argparse
import datetime
import glob
import os
import sys
import sysconfig

import torch
import torch.distributed as dist

import tessera.torch as tt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from worker_common import arm_hang_dump, check, device, failures, use_device  # noqa: E402


def write_corpus(path, nbytes):
    """A local text corpus: the standard library's .py files in sorted order, concatenated (made once)."""
    if os.path.exists(path) and os.path.getsize(path) >= nbytes:
        return
    root = sysconfig.get_paths()["stdlib"]
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as out:
        total = 0
        for p in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
            with open(p, "rb") as f:
                b = f.read()
            out.write(b)
            total += len(b)
            if total >= nbytes:
                break
    os.replace(tmp, path)


class ByteDataset(torch.utils.data.Dataset):
    def __init__(self, path, seq):
        with open(path, "rb") as f:
            raw = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        n = raw.numel() // seq
        self.data = raw[: n * seq].view(n, seq).long()

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


def build_model(kind, seq, dim, layers):
    import transformers
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=dim, intermediate_size=4 * dim,
                                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                                       max_position_embeddings=seq, tie_word_embeddings=False)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=seq, n_embd=dim, n_layer=layers, n_head=4,
                                  bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    return transformers.GPT2LMHeadModel(cfg)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="tessera")
    p.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--bf16", action="store_true", help="TrainingArguments(bf16=True) (CUDA ranks)")
    p.add_argument("--corpus", default="/tmp/tessera-hf-corpus.txt")
    p.add_argument("--out", default="/tmp/tessera-hf-out")
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--ckpt-every", type=int, default=0)
    args = p.parse_args()
    arm_hang_dump()
    try:
        import transformers
    except ImportError as e:
        print(f"hf_trainer_worker: SKIPPED: cannot import transformers ({e})", flush=True)
        sys.exit(77)
    dev = device()
    use_device(dev)
    # the default group first: TrainingArguments/Accelerate then use it as it is (the module docstring says why)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        write_corpus(args.corpus, 2 << 20)
    dist.barrier()
    data = ByteDataset(args.corpus, args.seq)
    torch.manual_seed(1234)
    model = build_model(args.model, args.seq, args.dim, args.layers)
    callbacks = []
    if args.ckpt_dir:
        callbacks.append(dcp_callback(args.ckpt_dir, args.ckpt_every))
    targs = transformers.TrainingArguments(
        output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=args.batch,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        logging_steps=1, save_strategy="no", report_to="none", seed=1234, data_seed=1234,
        use_cpu=dev.type == "cpu", bf16=args.bf16, dataloader_num_workers=0, disable_tqdm=True,
        ddp_timeout=300, ddp_find_unused_parameters=False)
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=data, callbacks=callbacks)
    check(dist.get_backend() == args.backend,
          f"the Trainer's process group is {dist.get_backend()}, not {args.backend}")
    if rank == 0:
        st = trainer.accelerator.state
        print(f"transformers {transformers.__version__}; process group backend {dist.get_backend()}, world {world}; "
              f"Accelerate: distributed type {st.distributed_type}, backend label {st.backend}, device {st.device}; "
              f"model {args.model} {sum(q.numel() for q in model.parameters()) / 1e6:.2f}M parameters", flush=True)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if rank == 0:
        print(f"losses ({len(losses)} steps, rank 0's logged loss): " + " ".join(f"{x:.4f}" for x in losses),
              flush=True)
    check(len(losses) >= 2 and losses[-1] < losses[0],
          f"loss did not fall: {losses[0] if losses else None} -> {losses[-1] if losses else None}")
    wrapped = trainer.model_wrapped
    check(isinstance(wrapped, torch.nn.parallel.DistributedDataParallel),
          f"the Trainer did not wrap the model in DDP ({type(wrapped).__name__})")
    bad = tt.check_replicas(trainer.model)
    check(not bad, f"parameters differ across ranks after training: {bad}")
    if rank == 0:
        print(f"replicas: {'bit-identical on every rank' if not bad else f'{len(bad)} tensors differ'}", flush=True)
    if args.ckpt_dir:
        import torch.distributed.checkpoint as dcp
        from tessera.torch.checkpoint import TesseraReader
        fresh = build_model(args.model, args.seq, args.dim, args.layers).to(dev)
        sd = fresh.state_dict()
        dcp.load({"model": sd}, storage_reader=TesseraReader(args.ckpt_dir))
        fresh.load_state_dict(sd)
        mine = dict(trainer.model.named_parameters())
        off = [n for n, q in fresh.named_parameters() if not torch.equal(q.detach().cpu(), mine[n].detach().cpu())]
        check(not off, f"the model loaded from the Tessera checkpoint differs: {off[:5]}")
        if rank == 0:
            print(f"checkpoint: steps {callbacks[0].saved} saved through TesseraWriter into {args.ckpt_dir}; the "
                  f"newest loaded through TesseraReader is {'bit-identical' if not off else 'DIFFERENT'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: hf trainer on {args.backend} {'passed' if not failures else 'FAILED'}", flush=True)
    sys.exit(1 if failures else 0)


def dcp_callback(root, every):
    """A TrainerCallback that saves the model's state dict through torch.distributed.checkpoint into Tessera's
    store (TesseraWriter(root, global_step)) every `every` steps (0: none on the way) and at the end of training."""
    import torch.distributed.checkpoint as dcp
    import transformers
    from tessera.torch.checkpoint import TesseraWriter

    class DCPCallback(transformers.TrainerCallback):
        def __init__(self):
            self.saved = []

        def _save(self, state, model):
            if state.global_step in self.saved:
                return
            m = model.module if hasattr(model, "module") else model
            dcp.save({"model": m.state_dict()}, storage_writer=TesseraWriter(root, state.global_step))
            self.saved.append(state.global_step)

        def on_step_end(self, args, state, control, model=None, **kw):
            if every and state.global_step % every == 0:
                self._save(state, model)

        def on_train_end(self, args, state, control, model=None, **kw):
            self._save(state, model)

    return DCPCallback()


if __name__ == "__main__":
    main()
