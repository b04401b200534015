#!/bin/sh
# Entry point of the edge images: `shadowtutor edge`, configured from the environment
# (SHADOWTUTOR_SERVER, SHADOWTUTOR_SOURCE, ...; docs/deploy/edges.md). On balena an edge id left unset
# becomes the device's name, so that a fleet needs no setting per device; elsewhere the agent's
# own default applies (the hostname).
set -eu
if [ -z "${SHADOWTUTOR_EDGE_ID:-}" ] && [ -n "${BALENA_DEVICE_NAME_AT_INIT:-}" ]; then
    SHADOWTUTOR_EDGE_ID=$BALENA_DEVICE_NAME_AT_INIT
    export SHADOWTUTOR_EDGE_ID
fi
exec shadowtutor edge "$@"
