"""The pieces of scripts/bench.py, one module per concern:

  common      the workload's geometry, paths, logging, sample summaries
  corpus      the generated Megatron corpora (1x and the sparse 20x)
  cpu         CPU time of a process, of this one and of its children
  daemon      a dataloaderd daemon on a socket of its own
  clients     the client processes of the end-to-end runs, started together
  endtoend    throughput, wait, startup and CPU-cost rows against the daemon
  gobench     the Go ceiling and pipeline benchmarks, and the numpy copy ceiling
  textcorpus  the JSONL corpus made from the text on this machine
  text        the tokenizer rows and the rows of text tokenized on the fly
  peers       the loaders users would otherwise pick (scripts/bench_peers.py)
  report      the rows, the machine, the Markdown and the text table
  targets     the issue's targets and each one's verdict for a run
  spread      several runs' JSON folded into one table of their spread
"""
