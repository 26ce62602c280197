"""The training engine: trains a model and says everything as events; never imports textual, nor any
tuitrain layer above it. docs/architecture.md draws the whole map; here, one line per module.

The run
  learner.py           CoreLearner: the parts of a training run, put together; `fit`
  sections.py          its settings, grouped as a config's tables: Experiment, Train, Data, Metrics, Log ...
  loop.py              the loop: epochs, a training epoch (general and plain), validation, the step boundary
  loop_parts.py        what the loop reads (LoopParts, built by the Learner at each fit), Judge, timed
  session.py           what a fit trains inside: the frozen collector, the heap, max_time, the stall watchdog
  environment.py       the device resolved, and the machine RunStarted describes
  learner_media.py     the Learner's media for one fit: where log_image/text/histogram write
  phases.py            a phase is one batch's step: TrainPhase, CustomTrainPhase, ValidPhase
  lifecycle.py         between start and finish for any loop: control, pause, summary, RunFinished/RunFailed
  state.py             TrainState, StepOutput, FitResult, exit codes, the exceptions that cancel
  optimization.py      precision, backward, optimizer steps, clipping, schedulers
  learner_checkpoint.py  what a checkpoint holds: saving, loading, model.pt (CheckpointIO)
  learner_health.py    the [watch] rules acted on: skip, rollback, stop, the stall watchdog (HealthGuard)
  health.py            the [watch] table (Watch) and Health, which hands each value to the rules that read it
  rules/               the [watch] rules, one class a file (rules/base.py Rule): a new rule is one file
  verdicts.py          a rule's verdict said as AlertRaised, for HealthGuard and Monitor alike
What leaves it
  events.py            every fact as a frozen dataclass
  callbacks.py         the event bus: subscribers, per-step sampling, a writer's failure
  output.py            what the user's code prints, as OutputPrinted events
  text.py              text from the user's code made safe to show
  media.py             images, texts and histograms logged: copied, written and said off the loop's thread
  images.py            what log_image is given, made one RGB image (grids, shrinking) and a PNG
  png.py               PNG files written and read with zlib alone
Steering and files
  control.py           the Interrupter: stop, pause, checkpoint requests; the control folder
  saving.py            when to save: a moment and the settings in, a Save or None out (pure)
  checkpoint.py        the checkpoint folder: atomic background writes, the index, loading
  retention.py         which checkpoints are kept; media thinned evenly
  fsutil.py            atomic, durable file writes
  schedules.py         a schedule's length across a longer resume
Data, measures, machines
  data.py              resumable sampling, loaders, seeding, RNG state
  batches.py           a batch's size and tokens, moving it to the device
  metrics.py           metrics accumulated on the device, read when due; MetricSet
  flops.py             FLOPs of a step (tflops, mfu) and a device's peak
  ema.py               an exponential moving average of the weights
  early_stopping.py    stop when a metric stops improving
  devices.py           CPU/GPU utilization, sampled about once a second
  heap.py              freed memory kept in the process while training
  housekeeping.py      a run's periodic chores, on its main thread
  strategies/          one process, DDP or FSDP ranks, and the ranks' agreement
"""
