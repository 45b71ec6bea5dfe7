# What the recipes share: sourced by them, not run on its own.
#
# A recipe run again with the same arguments after it was stopped (Ctrl-C, a machine that went
# away) goes on where it stopped: a model it finished training is kept, a training run it
# started goes on from its last checkpoint (`tfm train --resume`: the same schedule, the
# minutes already trained counted), files it finished writing are not written again.

# how_to_start DIR WHAT LOG NEW...: what the recipe does with the training run in DIR, said
# in one line ("WHAT: ..."). If the recipe finished it before (it then touched DIR.done), it
# returns 1: nothing to train. Otherwise it sets the array `start` to the options that begin
# the run: --resume if DIR holds a run that did not finish, else NEW... (a new run; its log
# LOG, if one is named, emptied). LOG is "-" where the run writes to the terminal.
how_to_start() {
    local dir=$1 what=$2 log=$3
    shift 3
    local where=""
    if [ "$log" != - ]; then where=" (log: $log)"; fi
    if [ -e "$dir.done" ]; then
        echo "$what: trained before ($dir.done); kept"
        return 1
    elif [ -e "$dir/train_state.pt" ]; then
        echo "$what: resuming the stopped run$where"
        start=(--resume)
    else
        echo "$what: training$where"
        if [ "$log" != - ]; then : > "$log"; fi
        start=("$@")
    fi
}

# tokenizer_once DATA SRC TGT FILE: the recipes' joint 8k BPE, unless FILE exists (a model
# being resumed was trained with that one).
tokenizer_once() {
    if [ -e "$4" ]; then
        echo "tokenizer: $4 (written before)"
    else
        tfm train-tokenizer --train "$1/train" -s "$2" -t "$3" --vocab-size 8000 -o "$4"
    fi
}

# wait_training: waits for each run of the arrays `pids` and `training` (training runs started
# side by side in the background, their PIDs and directories) and marks each one finished with
# DIR.done, which how_to_start reads. A run that failed ends the recipe (set -e).
wait_training() {
    local i
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}"
        touch "${training[$i]}.done"
    done
}

# stop_training PID...: asks the training runs PID... to stop and waits for them. Each is sent
# one SIGTERM, on which it saves a checkpoint before it stops (a second signal would stop it at
# once, without saving). For that the recipes start their runs in the background with job
# control on (`set -m`): each run in a process group of its own, so that a Ctrl-C in the
# terminal reaches the recipe alone and the recipe asks each run once.
stop_training() {
    if [ $# -gt 0 ]; then
        kill -TERM "$@" 2>/dev/null || true
        wait "$@" 2>/dev/null || true
    fi
}

# lock_out DIR: this recipe alone writes into DIR (created if need be): a second recipe into
# the same DIR is refused (exit 2) with one line naming the first, instead of both training
# over each other's models. The lock is flock(1) on DIR/.recipe.lock, held through a file
# descriptor that this shell and every command it starts inherit: it lasts while any of them
# runs and goes with the last of them, however they end (kill -9 included), so nothing is left
# to clean up. A recipe that runs another into the same DIR passes its lock on.
lock_out() {
    local dir=$1 lock
    mkdir -p "$dir"
    lock="$(cd "$dir" && pwd)/.recipe.lock"
    case ":${TFM_RECIPE_LOCKS:-}:" in *":$lock:"*) return 0 ;; esac
    exec {recipe_lock}>>"$lock"
    if ! flock -n "$recipe_lock"; then
        echo "error: $dir is in use by $(cat "$lock" 2>/dev/null || echo 'another recipe'); wait for it to end, or give another OUT_DIR" >&2
        exit 2
    fi
    echo "$(basename "$0") (process $$, since $(date '+%Y-%m-%d %H:%M:%S'))" > "$lock"
    export TFM_RECIPE_LOCKS="${TFM_RECIPE_LOCKS:-}:$lock"
}

# lc_tok_option: --lc-tok where sacremoses is installed (the moses extra: the lowercased,
# Moses-tokenized BLEU that Multi30k papers report), nothing otherwise. Found without being
# imported: the import compiles its patterns, which is slow.
lc_tok_option() {
    if python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("sacremoses") is None)' 2>/dev/null; then
        echo --lc-tok
    fi
}

# guided_alignment_options DATA_DIR: `tfm train --guided-alignment 0.05` (one cross-attention
# head trained towards eflomal's word alignments, Garg et al. 2019), DATA_DIR aligned first by
# `tfm align` if it is not yet, where eflomal is installed (the align extra) and GUIDED is not 0;
# nothing otherwise. Documents' inline tags are then placed by that head, which placed them
# best of the methods measured (docs/BENCHMARKS.md, "Inline tags through a trained model").
guided_alignment_options() {
    [ "${GUIDED:-1}" != 0 ] || return 0
    python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("eflomal") is None)' 2>/dev/null || return 0
    if [ ! -e "$1/train.align.npz" ]; then
        tfm align "$1" >&2
    fi
    echo --guided-alignment 0.05
}

# off_target_option: --off-target where py3langid is installed (the langid extra: the share
# of translations in another language than the target), nothing otherwise.
off_target_option() {
    if python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("py3langid") is None)' 2>/dev/null; then
        echo --off-target
    fi
}

# budget MINUTES RATE STEPS [train options...]: the `tfm train` options that end one of a
# recipe's training runs. On a CPU, --max-time MINUTES (the learning rate decays to zero at
# the end of the minutes). A GPU trains the same batches many times faster, so where the run
# trains on CUDA (its --device, else CUDA where torch sees one) the budget is the steps that
# the recipe's reference CPU trained in those minutes, RATE a minute (docs/multi30k.md): the
# same run, in minutes of GPU time, its rate decaying to zero at that step instead. STEPS
# (non-empty) asks for that many steps on any device.
budget() {
    local minutes=$1 rate=$2 steps=$3
    shift 3
    if [ -z "$steps" ] && trains_on_cuda "$@"; then steps=$(( minutes * rate )); fi
    if [ -n "$steps" ]; then
        echo --max-steps "$steps" --max-time 0  # the steps end it, not the minutes
    else
        echo --max-time "$minutes"
    fi
}

# trains_on_cuda [train options...]: whether `tfm train` with those options trains on CUDA:
# their --device, else (auto) where torch sees a CUDA device.
trains_on_cuda() {
    local device=auto previous=""
    for option in "$@"; do
        if [ "$previous" = --device ]; then device=$option; fi
        case $option in --device=*) device=${option#--device=} ;; esac
        previous=$option
    done
    case $device in
        cpu) return 1 ;;
        cuda*) return 0 ;;
    esac
    # No NVIDIA device file: no CUDA, known without torch's import (seconds on some CPUs).
    compgen -G "/dev/nvidia[0-9]*" > /dev/null || return 1
    python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null
}
