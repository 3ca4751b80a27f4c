"""Running a job: plan its tasks, start them here and over SSH, supervise, restart, tear down."""
