"""The lean profile's NAT instance: its own user data (forwarding and masquerading at
every boot, no package install unless the image lacks both nft and iptables, then with
retries; idempotent), its heartbeat's rights, and the alarm on the heartbeat's absence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from infra import nat
from infra.settings import DeploymentConfig
from tests.infra.conftest import alarm_by_name, notification_topic_id, resources, synthesize
from timekeeper import observability as obs


@pytest.fixture(scope="module")
def lean():
    return synthesize({DeploymentConfig.KEY_EGRESS: "nat-instance"})


def _user_data(template) -> str:
    [instance] = resources(template, "AWS::EC2::Instance").values()
    encoded = instance["Properties"]["UserData"]["Fn::Base64"]
    assert isinstance(encoded, str)  # no token: the script is what boots
    return encoded


def test_the_nat_instance_boots_with_its_own_forwarding_unit_not_a_package_install(lean):
    text = _user_data(lean.data_template)
    # CDK's default (one yum install with no retry, then iptables) is gone
    assert "iptables-services" not in text and "yum install" not in text
    # Forwarding persists, and both units are enabled (they run again at every boot)
    assert "net.ipv4.ip_forward = 1" in text
    assert "systemctl enable --now timekeeper-nat.service timekeeper-nat-heartbeat.timer" in text
    assert "WantedBy=multi-user.target" in text and "OnUnitActiveSec=60" in text
    # And the whole script is valid bash
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def _stubs(tmp_path: Path, *, nft: bool, iptables: bool = False, installs_after: int = 0) -> tuple[Path, Path]:
    """A PATH with recording stand-ins for the system's commands; returns (bin, log)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("awk", "seq", "cat", "grep", "cp"):
        os.symlink(shutil.which(tool), bin_dir / tool)

    def stub(name: str, body: str = "", folder: Path = bin_dir) -> None:
        path = folder / name
        path.write_text(f'#!/bin/bash\necho "{name} $*" >> {log}\n{body}\n')
        path.chmod(0o755)

    stub("sysctl")
    stub("sleep")
    stub("ip", 'echo "default via 10.0.0.1 dev ens5 proto dhcp"')
    spare = tmp_path / "spare"
    spare.mkdir()
    stub("nft", "cat > /dev/null", folder=bin_dir if nft else spare)
    if iptables:
        stub("iptables", '[ "$3" = "-C" ] && exit 1; exit 0')
    counter = tmp_path / "attempts"
    counter.write_text("0")
    # dnf fails until its installs_after-th attempt, which installs nft
    stub("dnf", f"n=$(( $(cat {counter}) + 1 )); echo $n > {counter}; [ $n -ge {installs_after} ] || exit 1; "
                f"cp -p {spare}/nft {bin_dir}/nft")
    return bin_dir, log


def _run_setup(tmp_path: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "timekeeper-nat"
    script.write_text(nat.SETUP_SCRIPT)
    return subprocess.run([shutil.which("bash"), str(script)], env={"PATH": str(bin_dir)}, capture_output=True,
                          text=True)


def test_setup_masquerades_with_nft_without_installing_anything_and_again_the_same_at_reboot(tmp_path):
    # Given an image with nft
    bin_dir, log = _stubs(tmp_path, nft=True)
    # When the unit runs at two boots
    first = _run_setup(tmp_path, bin_dir)
    calls_after_first = log.read_text().splitlines()
    second = _run_setup(tmp_path, bin_dir)
    # Then it forwards and replaces its own table, installs nothing, and does the same again
    assert first.returncode == second.returncode == 0, first.stderr
    assert calls_after_first == ["sysctl -q -w net.ipv4.ip_forward=1", "ip -4 route show default",
                                 "nft delete table ip timekeeper_nat", "nft -f -"]
    assert log.read_text().splitlines() == calls_after_first * 2


def test_setup_retries_the_install_when_the_image_has_neither_nft_nor_iptables(tmp_path):
    bin_dir, log = _stubs(tmp_path, nft=False, installs_after=3)
    result = _run_setup(tmp_path, bin_dir)
    calls = log.read_text().splitlines()
    assert result.returncode == 0, result.stderr
    assert [c for c in calls if c.startswith("dnf")] == ["dnf -y -q install nftables"] * 3
    assert calls[-1] == "nft -f -"


def test_setup_uses_iptables_when_that_is_what_the_image_has(tmp_path):
    bin_dir, log = _stubs(tmp_path, nft=False, iptables=True)
    result = _run_setup(tmp_path, bin_dir)
    calls = log.read_text().splitlines()
    assert result.returncode == 0, result.stderr
    assert not [c for c in calls if c.startswith("dnf")]
    assert calls[-1] == "iptables -t nat -A POSTROUTING -o ens5 -j MASQUERADE"


def test_setup_fails_loudly_when_nothing_could_be_installed(tmp_path):
    bin_dir, _ = _stubs(tmp_path, nft=False, installs_after=99)
    result = _run_setup(tmp_path, bin_dir)
    assert result.returncode != 0 and "could be installed" in result.stderr


def test_the_heartbeat_publishes_only_in_the_timekeeper_namespace(lean):
    template = lean.data_template
    [instance] = resources(template, "AWS::EC2::Instance").values()
    profile = template["Resources"][instance["Properties"]["IamInstanceProfile"]["Ref"]]
    [role_ref] = profile["Properties"]["Roles"]
    statements = [s for p in resources(template, "AWS::IAM::Policy").values()
                  if role_ref in p["Properties"]["Roles"] for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert statements == [{"Action": "cloudwatch:PutMetricData", "Effect": "Allow", "Resource": "*",
                           "Condition": {"StringEquals": {"cloudwatch:namespace": obs.NAMESPACE}}}]
    assert f"--namespace {obs.NAMESPACE} --metric-name {nat.NAT_FORWARDING_METRIC}" in nat.HEARTBEAT_SCRIPT


def test_the_heartbeats_absence_notifies(lean):
    template = lean.app_template
    props = alarm_by_name(template, "Timekeeper-network-nat-forwarding")
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
        obs.NAMESPACE, nat.NAT_FORWARDING_METRIC, "SampleCount")
    [dimension] = props["Dimensions"]
    assert dimension["Name"] == "InstanceId"
    assert props["Threshold"] == 1 and props["ComparisonOperator"] == "LessThanThreshold"
    assert props["TreatMissingData"] == "breaching"
    topic = {"Ref": notification_topic_id(template)}
    assert props["AlarmActions"] == [topic] and props["OKActions"] == [topic]
    assert "nat-forwarding" in json.dumps(props["AlarmDescription"])


def test_the_heartbeat_script_is_valid_bash():
    subprocess.run(["bash", "-n"], input=nat.HEARTBEAT_SCRIPT, text=True, check=True)
    subprocess.run(["bash", "-n"], input=nat.SETUP_SCRIPT, text=True, check=True)
