#!/bin/sh
# The toolchain's Pulumi CLI, set up for this project offline: plugins from the project's
# PULUMI_HOME (the Kubernetes provider is installed there), no update check, and no attempt to
# download plugins it cannot reach (the Go SDK's cloud-sdk module advertises one the program never
# uses; each run would otherwise spend seconds retrying its download). Each default yields to a
# value already in the environment.
: "${PULUMI_HOME:=@ROOT@/.toolchain/pulumi-home}"
: "${PULUMI_SKIP_UPDATE_CHECK:=true}"
: "${PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION:=true}"
export PULUMI_HOME PULUMI_SKIP_UPDATE_CHECK PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION
exec "@CLI@" "$@"
