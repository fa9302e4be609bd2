"""What drives the tests: the project and its plan, commands run in or out of process, the engine
tier's real Pulumi CLI, schemas and references to check the fakes and the plan against, waits."""
