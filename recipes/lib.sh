# What the recipes share: sourced by them, not run on its own.
#
# A recipe run again with the same arguments after it was stopped (Ctrl-C, a machine that went
# away) goes on where it stopped: a model it finished training is kept, a training run it
# started goes on from its last checkpoint (`tfm train --resume`: the same schedule, the
# minutes already trained counted), files it finished writing are not written again.

# training_state DIR: "done" if the recipe finished training DIR before (it then touched
# DIR.done), "stopped" if DIR holds a run that did not finish (one to resume), "new" otherwise.
training_state() {
    if [ -e "$1.done" ]; then
        echo done
    elif [ -e "$1/train_state.pt" ]; then
        echo stopped
    else
        echo new
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
