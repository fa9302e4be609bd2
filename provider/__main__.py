"""The component provider: serves the components of ``tpu_training_components`` to Pulumi programs
in any language. The Python language host runs this file as ``python provider/ ENGINE_ADDRESS``;
the schema comes from the components' own type annotations (the SDK's analyzer, as
``component_provider_host`` uses it; see ``tpu_training_components.provider`` for the one change)."""

from tpu_training_components.provider import serve

if __name__ == "__main__":
    serve()
