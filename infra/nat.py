"""The lean profile's NAT instance: its own boot configuration (forwarding and masquerading
without a package install, re-applied at every boot) and its forwarding heartbeat.

CDK's default user data installs ``iptables-services`` once, with no retry: on Amazon
Linux 2023 the install can fail, and the instance then forwards nothing while its status
checks pass. Here a systemd unit (``timekeeper-nat.service``, enabled: it runs at every
boot) turns on IPv4 forwarding and adds the masquerade rule with ``nft`` (part of the
image), or with ``iptables`` when that is what the image has, installing ``nftables``
(with retries) only when neither exists. It is idempotent: the rule lives in a table of
its own that is replaced, never appended to.

The heartbeat: a systemd timer (``timekeeper-nat-heartbeat.timer``) checks every minute
that forwarding is on and the masquerade rule is in place, and only then publishes
:data:`NAT_FORWARDING_METRIC` (1, dimension ``InstanceId``) to CloudWatch with the
instance's role; publishing itself goes out through the instance's public address, so a
datapoint also says the instance reaches AWS's APIs. The alarm on its absence (missing
data breaching) is :class:`infra.monitoring.Monitoring`'s.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam

from timekeeper.observability import NAMESPACE

#: The heartbeat metric (namespace :data:`timekeeper.observability.NAMESPACE`, dimension
#: ``InstanceId``): 1 each minute the instance forwards and masquerades.
NAT_FORWARDING_METRIC = "NatForwarding"
#: How often the heartbeat runs (seconds).
HEARTBEAT_INTERVAL_S = 60
#: Attempts and pause (seconds) of the package install, when the image has neither nft
#: nor iptables.
INSTALL_ATTEMPTS = 10
INSTALL_PAUSE_S = 15

#: Turns forwarding and masquerading on; exits non-zero when it could not.
SETUP_SCRIPT = f"""#!/bin/bash
# Timekeeper NAT: IPv4 forwarding and masquerading, applied at every boot (idempotent).
set -u
sysctl -q -w net.ipv4.ip_forward=1
out=$(ip -4 route show default | awk '{{print $5; exit}}')
[ -n "$out" ] || {{ echo "timekeeper-nat: no default route" >&2; exit 1; }}
if ! command -v nft >/dev/null 2>&1 && ! command -v iptables >/dev/null 2>&1; then
  for attempt in $(seq {INSTALL_ATTEMPTS}); do
    dnf -y -q install nftables && break
    sleep {INSTALL_PAUSE_S}
  done
fi
if command -v nft >/dev/null 2>&1; then
  nft delete table ip timekeeper_nat 2>/dev/null || true
  nft -f - <<RULES
table ip timekeeper_nat {{
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "$out" masquerade
  }}
}}
RULES
elif command -v iptables >/dev/null 2>&1; then
  iptables -t nat -C POSTROUTING -o "$out" -j MASQUERADE 2>/dev/null \\
    || iptables -t nat -A POSTROUTING -o "$out" -j MASQUERADE
else
  echo "timekeeper-nat: neither nft nor iptables could be installed" >&2; exit 1
fi
"""

#: Publishes the heartbeat only when forwarding is on and the masquerade rule is there.
HEARTBEAT_SCRIPT = f"""#!/bin/bash
# Timekeeper NAT heartbeat: publish {NAT_FORWARDING_METRIC}=1 only while the instance forwards.
set -u
[ "$(sysctl -n net.ipv4.ip_forward)" = "1" ] || exit 1
if command -v nft >/dev/null 2>&1 && nft list table ip timekeeper_nat 2>/dev/null | grep -q masquerade; then
  :
elif command -v iptables >/dev/null 2>&1 && iptables -t nat -S POSTROUTING 2>/dev/null | grep -q MASQUERADE; then
  :
else
  exit 1
fi
token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token -H "X-aws-ec2-metadata-token-ttl-seconds: 60")
instance=$(curl -sf -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/instance-id)
region=$(curl -sf -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/placement/region)
aws cloudwatch put-metric-data --region "$region" --namespace {NAMESPACE} --metric-name {NAT_FORWARDING_METRIC} \\
  --dimensions "InstanceId=$instance" --value 1 --unit Count
"""

_SETUP_UNIT = """[Unit]
Description=Timekeeper NAT forwarding and masquerading
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/timekeeper-nat
Restart=on-failure
RestartSec=30

[Install]
WantedBy=multi-user.target
"""

_HEARTBEAT_UNIT = """[Unit]
Description=Timekeeper NAT forwarding heartbeat
After=timekeeper-nat.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/timekeeper-nat-heartbeat
"""

_HEARTBEAT_TIMER = f"""[Unit]
Description=Timekeeper NAT forwarding heartbeat, every minute

[Timer]
OnBootSec={HEARTBEAT_INTERVAL_S}
OnUnitActiveSec={HEARTBEAT_INTERVAL_S}

[Install]
WantedBy=timers.target
"""


def _write(path: str, content: str, mode: str) -> list[str]:
    marker = "TIMEKEEPER_EOF"
    if marker in content:
        raise ValueError(f"{path}: its content holds the here-document's end marker")
    return [f"cat > {path} <<'{marker}'", content.rstrip("\n"), marker, f"chmod {mode} {path}"]


def nat_user_data() -> ec2.UserData:
    """The NAT instance's user data (bash, first boot): writes :data:`SETUP_SCRIPT` and
    :data:`HEARTBEAT_SCRIPT` to ``/usr/local/sbin``, their systemd units, the forwarding
    sysctl (persistent), and enables and starts both (the setup unit retries every 30 s
    until it succeeds)."""
    user_data = ec2.UserData.for_linux()
    user_data.add_commands(
        "echo 'net.ipv4.ip_forward = 1' > /etc/sysctl.d/90-timekeeper-nat.conf",
        *_write("/usr/local/sbin/timekeeper-nat", SETUP_SCRIPT, "0755"),
        *_write("/usr/local/sbin/timekeeper-nat-heartbeat", HEARTBEAT_SCRIPT, "0755"),
        *_write("/etc/systemd/system/timekeeper-nat.service", _SETUP_UNIT, "0644"),
        *_write("/etc/systemd/system/timekeeper-nat-heartbeat.service", _HEARTBEAT_UNIT, "0644"),
        *_write("/etc/systemd/system/timekeeper-nat-heartbeat.timer", _HEARTBEAT_TIMER, "0644"),
        "systemctl daemon-reload",
        "systemctl enable --now timekeeper-nat.service timekeeper-nat-heartbeat.timer",
    )
    return user_data


def grant_heartbeat(role: iam.IRole) -> None:
    """Let the NAT instance's ``role`` publish its heartbeat: ``cloudwatch:PutMetricData``
    in the Timekeeper namespace only (the action takes no resource but ``*``)."""
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["cloudwatch:PutMetricData"], resources=["*"],
        conditions={"StringEquals": {"cloudwatch:namespace": NAMESPACE}}))
