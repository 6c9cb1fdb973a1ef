#!/bin/sh
# pip for the image's venv (/opt/venv), as the builder stage runs it. When the build is
# given the secret `extra-ca` (a PEM bundle: a TLS-intercepting proxy's CA), pip trusts it
# besides its own bundle. The joined bundle is written to /run/ca, a tmpfs the RUN step
# mounts, so neither it nor the secret is ever in a layer.
set -eu
if [ -s /run/secrets/extra-ca ]; then
    own="$(python -c 'from pip._vendor import certifi; print(certifi.where())')"
    cat "$own" /run/secrets/extra-ca >/run/ca/bundle.pem
    export PIP_CERT=/run/ca/bundle.pem
fi
exec python -m pip --python /opt/venv/bin/python "$@"
