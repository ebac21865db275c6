"""The conformance suite as a test package, for a team's own pytest.

    pytest --pyargs attention_ports.conformance --port r=my_port.R
    pytest --pyargs attention_ports.conformance --port julia=MyPort.jl --case 'sdpa_*'

The options and fixtures come from the plugin ``attention_ports.pytest_plugin`` (a ``pytest11``
entry point, loaded automatically wherever attention-ports is installed).
"""
