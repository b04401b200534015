"""The in-process evaluation harness: the paper's Tables 2, 5 and 6 on
generated scenes, the pre-training of the default student, and the student-inference benchmark."""
