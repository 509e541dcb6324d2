"""`aaco alert`: the alerts confirmed changes opened (governance.alerts.lifecycle), and what people say of
them: list, show, ack, invalid (noise), fixed."""

from __future__ import annotations

from aaco_pipelines.cli.common import add_json_option, emit, print_json, with_examples
from aaco_pipelines.config import AacoPaths

ACTIONS = {"ack": "acknowledged", "invalid": "invalid", "fixed": "fixed"}
ACTION_EXAMPLE = {
    "ack": "looking into the new kernel",
    "invalid": "a noisy neighbour on the host",
    "fixed": "reverted in 1.2.1",
}
ACTION_HELP = {
    "ack": "someone is on it: updates stop notifying",
    "invalid": "noise: its sessions leave the metric's baseline, not alerted again for 14 days",
    "fixed": "the change is gone (aaco closes a regression itself once it is measured gone)",
}


def cmd_alert_list(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.alerts.lifecycle import list_alerts
    from aaco_pipelines.report.alerts_text import alert_line
    from aaco_pipelines.tracelake.queries import open_lake

    alerts = list_alerts(open_lake(paths.tracelake), state=args.state, model=args.model)
    if args.json:
        print_json(alerts)
    elif not alerts:
        print("no alerts" + (f" {args.state}" if args.state else ""))
    else:
        emit("\n".join(alert_line(a) for a in alerts))
    return 0


def cmd_alert_show(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.alerts.lifecycle import alert_history, find_alert
    from aaco_pipelines.report.alerts_text import alert_line, event_line
    from aaco_pipelines.tracelake.queries import open_lake

    lake = open_lake(paths.tracelake)
    alert = find_alert(lake, args.alert)
    print(alert_line(alert))
    for event in alert_history(lake, alert["alert_id"]):
        print(event_line(event))
    return 0


def cmd_alert_set(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.alerts.lifecycle import set_state
    from aaco_pipelines.report.alerts_text import alert_line
    from aaco_pipelines.tracelake.queries import open_lake

    alerts = set_state(
        open_lake(paths.tracelake), args.alert, ACTIONS[args.alert_command], args.reason, args.by,
        together=not args.only,
    )  # fmt: skip
    print("\n".join(alert_line(alert) for alert in alerts))
    return 0


def cmd_alert_deliver(args, paths: AacoPaths) -> int:
    """Deliver the notifications due now (what the Dagster sensor does on each tick)."""
    from aaco_pipelines.errors import AacoInputError
    from aaco_pipelines.governance.alerts.notifications import URL_VARIABLE, Webhook, deliver_due
    from aaco_pipelines.tracelake.queries import open_lake

    webhook = Webhook.from_env()
    if webhook is None:
        raise AacoInputError(
            f"no alert webhook: {URL_VARIABLE} is not set", fix=f"export {URL_VARIABLE}=https://..."
        )
    done = deliver_due(open_lake(paths.tracelake), webhook)
    for d in done:
        print(f"{d.alert_id} {d.event_id} {d.status}" + (f" ({d.error})" if d.error else ""))
    print(f"{len(done)} notifications tried for {webhook.endpoint}")
    return 0 if all(d.status == "delivered" for d in done) else 1


def add_parser(sub) -> None:
    alert_parser = sub.add_parser(
        "alert", help="alerts opened by confirmed regressions, improvements and SLO breaches"
    )
    with_examples(alert_parser, "aaco alert list --state new", "aaco alert show 3f2a")
    alert = alert_parser.add_subparsers(dest="alert_command", required=True)
    listing = alert.add_parser("list", help="alerts, the ones waiting for someone first")
    listing.add_argument("--state", help="new, acknowledged, invalid, fixed or reopened")
    listing.add_argument("--model", help="only this model's")
    add_json_option(listing, "the alerts")
    with_examples(listing, "aaco alert list", "aaco alert list --model resnet_cnn --json")
    listing.set_defaults(func=cmd_alert_list)
    show = alert.add_parser("show", help="one alert and every change of it")
    show.add_argument("alert", help="its id (a unique prefix will do)")
    with_examples(show, "aaco alert show 3f2a")
    show.set_defaults(func=cmd_alert_show)
    deliver = alert.add_parser(
        "deliver",
        help="send the notifications due now to AACO_ALERT_WEBHOOK_URL (exit 1 if any failed)",
    )
    with_examples(deliver, "aaco alert deliver  # with AACO_ALERT_WEBHOOK_URL set")
    deliver.set_defaults(func=cmd_alert_deliver)
    for action, help_text in ACTION_HELP.items():
        change = alert.add_parser(action, help=help_text)
        change.add_argument("alert", help="its id (a unique prefix will do)")
        change.add_argument("--reason", required=True, help="what you found")
        change.add_argument("--by", help="who (default: your user name)")
        change.add_argument(
            "--only",
            action="store_true",
            help="this alert alone (default: with the alerts the same change opened for its "
            "other metrics)",
        )
        with_examples(change, f'aaco alert {action} 3f2a --reason "{ACTION_EXAMPLE[action]}"')
        change.set_defaults(func=cmd_alert_set)
