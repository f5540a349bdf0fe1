#!/usr/bin/env bash
# Mutation testing on the fast tests (fake models): breaks the named modules one small change at
# a time (mutmut 3, which runs only the tests that cover each changed function) and reports how
# many changes a test caught. Run it on the modules a change touches before calling it done.
#
#   scripts/mutation.sh engine/vote.py server/gate.py     # modules under specem_local/
#   MUTATION_JOBS=2 scripts/mutation.sh engine/tools.py    # mutants run at once (default 1)
#   MUTATION_SAMPLE=120 scripts/mutation.sh server/openai_format.py   # a random sample (seed 0)
#   MUTATION_MATCH='option_round|choices' scripts/mutation.sh engine/rounds.py   # only the mutants of these functions
#
# A module of 1,000 mutants whose tests run a live server takes hours on 2 cores: a sample of a
# hundred or so gives its score within a few points (the report says the sample and its interval).
#
# It works in a scratch copy of the tree (the working tree, .venv and caches are left alone) and
# prints, per module: mutants, killed, survived, and the score that leaves out the mutants marked
# equivalent in scripts/mutation-equivalents.txt (one per line: NAME  # why it changes nothing).
# Survivors are listed with their diff in ${MUTATION_OUT:-scripts/mutation-reports}/MODULE.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
[ "$#" -gt 0 ] || { echo "usage: scripts/mutation.sh MODULE.py [MODULE.py...] (paths under specem_local/)" >&2; exit 2; }
[ -x .venv/bin/mutmut ] || .venv/bin/python -m pip install --quiet "mutmut>=3.8,<4"
OUT="${MUTATION_OUT:-scripts/mutation-reports}"
mkdir -p "$OUT"

for module in "$@"; do
  [ -f "specem_local/$module" ] || { echo "no module specem_local/$module" >&2; exit 2; }
  case "$module" in  # the fast tests that claim each module's behaviour (mutmut runs those covering a change)
    engine/conditions.py)
      selection='["tests/engine/test_conditions.py", "tests/engine/test_schemas.py"]' ;;
    engine/formats.py|engine/format_compiler.py|engine/schemas.py)
      selection='["tests/engine/test_formats.py", "tests/engine/test_conditions.py", "tests/engine/test_format_compiler.py", "tests/engine/test_schemas.py", "tests/engine/test_disagreeing_fakes.py", "tests/engine/test_thinking.py"]' ;;
    engine/tools.py|engine/tool_stream.py)
      selection='["tests/engine/test_tools.py", "tests/engine/test_tools_exact.py", "tests/server/test_replies.py", "tests/engine/test_tool_turns.py", "tests/engine/test_agent_loops.py", "tests/engine/test_disagreeing_fakes.py", "tests/server/test_anthropic_routes.py"]' ;;
    engine/vote.py)
      selection='["tests/engine/test_vote.py", "tests/engine/test_round.py", "tests/engine/test_draft_budget.py", "tests/engine/test_vote_gate.py", "tests/engine/test_contrastive.py"]' ;;
    engine/ask.py)
      selection='["tests/unit/test_ask.py", "tests/engine/test_prediction.py", "tests/engine/test_batch_hostile.py", "tests/engine/test_batch_on_fakes.py", "tests/server/test_openai_format.py", "tests/server/test_ollama_format.py"]' ;;
    engine/request.py)
      selection='["tests/engine/test_thinking_room.py", "tests/engine/test_request_exact.py", "tests/engine/test_thinking.py", "tests/engine/test_round.py", "tests/engine/test_places.py"]' ;;
    server/replies.py)
      selection='["tests/server/test_replies.py", "tests/server/test_replies_exact.py", "tests/server/test_openai_format.py", "tests/server/test_ollama_format.py", "tests/server/test_tool_routes.py", "tests/server/test_thinking_routes.py", "tests/server/test_logprobs_hostile.py", "tests/server/test_confidence_routes.py", "tests/server/test_task_routes.py"]' ;;
    engine/rounds.py|engine/phases.py)
      selection='["tests/engine/test_round.py", "tests/engine/test_round_exact.py", "tests/engine/test_phases_exact.py", "tests/engine/test_choices.py", "tests/engine/test_evidence.py", "tests/engine/test_formats.py", "tests/engine/test_disagreeing_fakes.py", "tests/engine/test_continue.py", "tests/engine/test_thinking.py", "tests/engine/test_lost_members.py", "tests/engine/test_draft_budget.py", "tests/engine/test_vote_gate.py", "tests/engine/test_shared_draft.py", "tests/engine/test_token_contrast.py", "tests/engine/test_choice_points.py", "tests/engine/test_option_answers.py", "tests/engine/test_round_fields.py"]' ;;
    engine/answer_stream.py)
      selection='["tests/engine/test_answer_stream_exact.py", "tests/engine/test_lost_members.py", "tests/engine/test_close_during_step.py", "tests/engine/test_places.py", "tests/engine/test_threads.py", "tests/engine/test_scheduler.py", "tests/engine/test_runner_exact.py", "tests/engine/test_carried_weights.py", "tests/storage/test_read_only.py", "tests/engine/test_batch_on_fakes.py", "tests/engine/test_batch_hostile.py", "tests/server/test_parallel_routes.py", "tests/server/test_line.py", "tests/engine/test_checks_hostile.py", "tests/engine/test_evidence.py"]' ;;
    engine/checking.py)
      selection='["tests/engine/test_checks_hostile.py", "tests/engine/test_evidence.py", "tests/engine/test_batch_exact.py", "tests/server/test_confidence_routes.py", "tests/unit/test_answer_printer.py", "tests/server/test_replies_exact.py"]' ;;
    engine/places.py|engine/many.py|engine/runner.py)
      selection='["tests/engine/test_close_during_step.py", "tests/engine/test_places.py", "tests/engine/test_threads.py", "tests/engine/test_scheduler.py", "tests/engine/test_runner_exact.py", "tests/engine/test_carried_weights.py", "tests/storage/test_read_only.py", "tests/engine/test_batch_on_fakes.py", "tests/engine/test_batch_hostile.py", "tests/server/test_parallel_routes.py", "tests/server/test_line.py"]' ;;
    engine/prompting.py)
      selection='["tests/engine/test_prompting.py", "tests/engine/test_tool_turns.py", "tests/engine/test_agent_loops.py", "tests/engine/test_tools.py", "tests/engine/test_continue.py", "tests/server/test_doors_mended.py", "tests/unit/test_event_records.py"]' ;;
    engine/thinking.py)
      selection='["tests/engine/test_thinking.py", "tests/engine/test_thinking_exact.py", "tests/server/test_thinking_routes.py", "tests/engine/test_cli_on_fakes.py"]' ;;
    commands/batch_learning.py)
      selection='["tests/engine/test_batch_learning.py", "tests/engine/test_batch_on_fakes.py", "tests/engine/test_batch_exact.py", "tests/engine/test_batch_hostile.py"]' ;;
    commands/batch.py|commands/run.py|commands/functions.py|commands/answer_printer.py)
      selection='["tests/unit/test_answer_printer.py", "tests/engine/test_batch_learning.py", "tests/engine/test_batch_on_fakes.py", "tests/engine/test_batch_hostile.py", "tests/engine/test_batch_exact.py", "tests/engine/test_breakages.py", "tests/engine/test_agent_loops.py", "tests/engine/test_functions.py", "tests/engine/test_cli_on_fakes.py", "tests/engine/test_checks_hostile.py", "tests/engine/test_option_answers.py"]' ;;
    server/gate.py)
      selection='["tests/server/test_gate.py", "tests/server/test_gate_asgi.py", "tests/server/test_routes.py", "tests/server/test_no_member_left.py"]' ;;
    server/openai_format.py|server/ollama_format.py)
      selection='["tests/server/test_openai_format.py", "tests/server/test_ollama_format.py", "tests/server/test_openai_format_exact.py", "tests/server/test_ollama_format_exact.py", "tests/server/test_confidence_routes.py", "tests/server/test_routes.py", "tests/server/test_tool_routes.py", "tests/server/test_structured.py", "tests/server/test_doors_mended.py", "tests/server/test_hostile_doors.py", "tests/server/test_logprobs_hostile.py", "tests/server/test_task_routes.py", "tests/server/test_prediction_routes.py"]' ;;
    server/kept.py)
      selection='["tests/server/test_kept.py", "tests/server/test_kept_routes.py", "tests/storage/test_kept_responses.py", "tests/server/test_responses_routes.py"]' ;;
    server/running.py)
      selection='["tests/server/test_running.py"]' ;;
    server/errors.py|server/app.py)
      selection='["tests/server/test_anthropic_format.py", "tests/server/test_anthropic_routes.py", "tests/server/test_routes.py", "tests/server/test_hostile_doors.py", "tests/server/test_task_routes.py", "tests/server/test_doors_mended.py", "tests/server/test_responses_routes.py", "tests/server/test_kept_routes.py", "tests/server/test_mcp_routes.py"]' ;;
    engine/choice_points.py)
      selection='["tests/engine/test_choice_points.py", "tests/engine/test_option_answers.py", "tests/engine/test_options_hostile.py"]' ;;
    engine/options.py|engine/option_answers.py|engine/task_weights.py)
      selection='["tests/engine/test_options.py", "tests/engine/test_option_answers.py", "tests/engine/test_choice_points.py", "tests/research/test_option_report.py", "tests/engine/test_options_hostile.py"]' ;;
    commands/calibrate.py)  # the tests that run `specem calibrate` (each way) on fakes
      selection='["tests/engine/test_option_answers.py", "tests/engine/test_evidence.py", "tests/engine/test_carried_weights.py", "tests/engine/test_calibrate_hostile.py", "tests/engine/test_options_hostile.py"]' ;;
    events.py)
      selection='["tests/storage", "tests/engine/test_evidence.py", "tests/server/test_logprobs_hostile.py", "tests/server/test_confidence_routes.py", "tests/unit", "tests/engine/test_option_answers.py", "tests/engine/test_round.py"]' ;;
    engine/learned.py)
      selection='["tests/engine/test_evidence.py", "tests/engine/test_calibrate_hostile.py", "tests/engine/test_carried_weights.py", "tests/engine/test_option_answers.py"]' ;;
    labelled/tasks.py|dirs.py)
      selection='["tests/engine/test_calibrate_hostile.py", "tests/unit", "tests/engine/test_batch_on_fakes.py", "tests/engine/test_batch_hostile.py", "tests/models/test_config.py", "tests/doors/test_files_we_read.py", "tests/research/test_bfcl.py", "tests/models/test_models_lock.py"]' ;;
    engine/evidence.py)
      selection='["tests/engine/test_evidence.py", "tests/research/test_confidence_report.py", "tests/server/test_confidence_routes.py", "tests/engine/test_checks_hostile.py", "tests/server/test_logprobs_hostile.py", "tests/storage/test_history_hostile.py"]' ;;
    server/responses_format.py|server/responses_mcp.py|server/responses_output.py|server/mcp_rounds.py)
      selection='["tests/server/test_responses_output.py", "tests/server/test_responses_format.py", "tests/server/test_responses_routes.py", "tests/server/test_mcp_routes.py", "tests/server/test_hostile_doors.py", "tests/server/test_agents_sdk.py", "tests/server/test_doors_mended.py", "tests/server/test_task_routes.py"]' ;;
    server/anthropic_format.py|server/anthropic_output.py)
      selection='["tests/server/test_anthropic_format.py", "tests/server/test_anthropic_routes.py", "tests/server/test_hostile_doors.py", "tests/server/test_doors_mended.py", "tests/server/test_task_routes.py"]' ;;
    server/writers.py)
      selection='["tests/server/test_responses_output.py", "tests/server/test_routes.py", "tests/server/test_choices_routes.py", "tests/server/test_responses_routes.py", "tests/server/test_mcp_routes.py", "tests/server/test_thinking_routes.py", "tests/server/test_tool_routes.py"]' ;;
    mcp/*) selection='["tests/mcp"]' ;;
    storage/history.py|storage/history_rows.py|storage/chats.py|storage/chat_files.py|commands/history.py)
      selection='["tests/storage", "tests/unit/test_properties.py", "tests/engine/test_cli_on_fakes.py", "tests/engine/test_batch_hostile.py", "tests/engine/test_leaderboard.py", "tests/server/test_line.py", "tests/server/test_no_member_left.py", "tests/unit/test_event_records.py"]' ;;
    setting_fields.py|settings.py)
      selection='["tests/unit/test_setting_values.py", "tests/unit/test_setting_forms.py", "tests/models/test_config.py", "tests/unit/test_docs.py", "tests/engine/test_request_exact.py", "tests/engine/test_sampling.py"]' ;;
    models/*|commands/models.py) selection='["tests/models"]' ;;
    storage/database.py) selection='["tests/storage"]' ;;
    engine/prediction.py|engine/member.py|engine/drafted.py)
      selection='["tests/engine/test_prediction.py", "tests/engine/test_round.py", "tests/engine/test_round_exact.py", "tests/engine/test_contrastive.py", "tests/engine/test_draft_budget.py", "tests/engine/test_vote_gate.py", "tests/server/test_prediction_routes.py"]' ;;
    engine/answer_events.py)
      selection='["tests/engine/test_round.py", "tests/engine/test_round_exact.py", "tests/engine/test_round_fields.py", "tests/engine/test_evidence.py", "tests/engine/test_lost_members.py", "tests/engine/test_thinking.py", "tests/engine/test_prediction.py", "tests/engine/test_contrastive.py", "tests/engine/test_token_contrast.py", "tests/engine/test_answer_stream_exact.py", "tests/engine/test_carried_weights.py", "tests/engine/test_choices.py", "tests/engine/test_draft_budget.py", "tests/engine/test_vote_gate.py", "tests/server/test_prediction_routes.py"]' ;;
    engine/segments.py) selection='["tests/engine/test_segments.py", "tests/engine/test_round.py"]' ;;
    server/*) selection='["tests/server"]' ;;  # after every server/ case above: a case's first match wins
    engine/*) selection='["tests/engine", "tests/server"]' ;;
    *) selection='["tests/engine", "tests/server", "tests/unit", "tests/storage", "tests/models"]' ;;
  esac
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work"
  # each selected test takes under 2 s: one past 15 s is a mutant that hangs, counted apart as a timeout
  # (tests/conftest.py ends the run with mutmut's timeout code), never as a kill. mutmut copies
  # ./models.toml as a file, not the link to the package's, so the one test that holds the
  # checkout's link to be left alone cannot hold there and is left out (test_scan.py's other
  # `models add`s run in a scratch folder)
  cat >> "$work/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["specem_local"]
only_mutate = ["specem_local/$module"]
also_copy = ["tui", "research", "scripts", "docs", "README.md", "models.toml", ".ci"]
pytest_add_cli_args = ["-m", "not models", "-p", "no:cacheprovider", "-q", "-x", "--timeout", "15", "--deselect", "tests/models/test_scan.py::test_add_creates_the_user_file_from_the_built_in_one"]
pytest_add_cli_args_test_selection = $selection
EOF
  names=()
  if [ -n "${MUTATION_SAMPLE:-}${MUTATION_MATCH:-}" ]; then  # generate and run the clean tests only, then the chosen
    (cd "$work" && "$ROOT/.venv/bin/mutmut" run "no-such-mutant" >"$work/run.log" 2>&1 || true)
    mapfile -t names < <(cd "$work" && "$ROOT/.venv/bin/mutmut" results --all true 2>/dev/null \
      | "$ROOT/.venv/bin/python" -c 'import random, re, sys
names = sorted(line.strip().split(": ")[0] for line in sys.stdin if ": " in line)
names = [name for name in names if re.search(sys.argv[2], name)]
print("\n".join(random.Random(0).sample(names, min(int(sys.argv[1] or len(names)), len(names)))))' \
      "${MUTATION_SAMPLE:-}" "${MUTATION_MATCH:-.}")
  fi
  (cd "$work" && "$ROOT/.venv/bin/mutmut" run --max-children "${MUTATION_JOBS:-1}" "${names[@]}" >>"$work/run.log" 2>&1 || true)
  if ! grep -q "mutations/second" "$work/run.log"; then  # the clean run failed: say why, score nothing
    echo "mutmut did not run on $module (its selected tests must pass first):" >&2
    tr '\r' '\n' < "$work/run.log" | grep -v "^⠋\|Generating\|Running" | tail -n 15 >&2
    rm -rf "$work"; trap - EXIT; continue
  fi
  (cd "$work" && "$ROOT/.venv/bin/mutmut" results --all true 2>/dev/null) > "$work/results.txt" || true
  name="$(echo "$module" | tr / .)"
  "$ROOT/.venv/bin/python" scripts/mutation_score.py "$module" "$work/results.txt" scripts/mutation-equivalents.txt \
    --diffs-from "$work" --mutmut "$ROOT/.venv/bin/mutmut" --report "$OUT/${name%.py}.txt"
  rm -rf "$work"
  trap - EXIT
done
